package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The limits of a branch (quotas): [limits] max-files and max-bytes in
// the files, --max-files and --max-bytes on the command line. Off by
// default for agentfs mount; agentfs run has limits that stop a runaway
// agent (RunMaxFiles, RunMaxBytes).

// ByteLimit is a bound on the bytes a branch holds: a size, or a share
// of the free space of the backstore's file system when the mount
// starts (Percent). Zero is no limit.
type ByteLimit struct {
	Bytes   int64
	Percent int
}

// Off reports whether there is no limit.
func (b ByteLimit) Off() bool { return b.Bytes == 0 && b.Percent == 0 }

// Of returns the limit in bytes, given the free bytes of the backstore's
// file system (for a Percent); 0 is no limit. A share of less than one
// byte is one byte.
func (b ByteLimit) Of(free int64) int64 {
	if b.Percent > 0 {
		return max(free/100*int64(b.Percent), 1)
	}
	return b.Bytes
}

// String writes the limit as ParseMaxBytes reads it.
func (b ByteLimit) String() string {
	switch {
	case b.Percent > 0:
		return strconv.Itoa(b.Percent) + "%"
	case b.Bytes > 0:
		return strconv.FormatInt(b.Bytes, 10)
	}
	return "off"
}

// Defaults of agentfs run: enough for any real project's build (a large
// monorepo's checkout and build trees hold some 100,000 files), few
// enough that a runaway loop stops long before the disk fills.
const (
	RunMaxFiles = 300000
)

// RunMaxBytes is agentfs run's byte limit: half of the space free on
// the backstore's file system when the session starts.
var RunMaxBytes = ByteLimit{Percent: 50}

// maxFilesBound bounds max-files (an int64 count the kernel would
// never reach: a mistake).
const maxFilesBound = 1 << 40

// ParseMaxFiles parses a file limit: a count, or off (0, none).
func ParseMaxFiles(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "off", "none", "0", "false", "no":
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, 64)
	if err != nil || n < 1 || n > maxFilesBound {
		return 0, errors.New("not a count: write a number of files such as 300000, or off")
	}
	return n, nil
}

// ParseMaxBytes parses a byte limit: a size (4096, 512K, 20G, 1T; K, M,
// G and T are powers of 1024, with or without "iB" or "B"), a share of
// the backstore's free space (50%), or off (0, none).
func ParseMaxBytes(s string) (ByteLimit, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	switch t {
	case "OFF", "NONE", "0", "FALSE", "NO":
		return ByteLimit{}, nil
	}
	if p, ok := strings.CutSuffix(t, "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 100 {
			return ByteLimit{}, errors.New("not a share: write a percentage of the backstore's free space from 1% to 100%")
		}
		return ByteLimit{Percent: n}, nil
	}
	v, mult, err := splitSize(t)
	if err != nil || v < 1 || v > (1<<62)/mult {
		return ByteLimit{}, fmt.Errorf("not a size: write e.g. 500M, 20G or 1T, a share of the backstore's free space such as 50%%, or off")
	}
	return ByteLimit{Bytes: v * mult}, nil
}
