package activity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// # Reading
//
// Read and Follow read a store's log files directly (no daemon needed):
// the old segment, then the current one. Only whole lines count: a line
// the writer has not finished yet is read once it is, and a line that
// does not parse (a crash cut it short) is skipped.

// ErrGone is returned by Follow when the log went away (the store of a
// private mount is deleted at unmount).
var ErrGone = errors.New("the activity log is gone (the mount was unmounted)")

// Line is one entry as read: parsed, and the line as written.
type Line struct {
	Entry
	Raw []byte // without the newline
}

// segment is an open log file and how far it has been read.
type segment struct {
	f       *os.File
	ino     uint64
	partial []byte // the start of a line not finished yet
}

func openSegment(p string) (*segment, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &segment{f: f, ino: st.Sys().(*syscall.Stat_t).Ino}, nil
}

// readLines calls fn with each whole line from where the last call
// stopped to the end of the file.
func (s *segment) readLines(fn func(Line) error) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := s.f.Read(buf)
		if n > 0 {
			data := append(s.partial, buf[:n]...)
			for {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					break
				}
				raw := data[:i]
				data = data[i+1:]
				var e Entry
				if json.Unmarshal(raw, &e) != nil {
					continue
				}
				if err := fn(Line{Entry: e, Raw: bytes.Clone(raw)}); err != nil {
					return err
				}
			}
			s.partial = bytes.Clone(data)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// openLog opens the current segment and the old one (nil when there is
// none, or when a rotation made the current one old meanwhile).
func openLog(dir string, s Stream) (cur, old *segment, err error) {
	cur, err = openSegment(filepath.Join(dir, s.cur()))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("no %s in the store %s: %w", s, dir, err)
		}
		return nil, nil, fmt.Errorf("opening %s: %w", s, err)
	}
	old, err = openSegment(filepath.Join(dir, s.old()))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return cur, nil, nil
	case err != nil:
		cur.f.Close()
		return nil, nil, fmt.Errorf("opening %s: %w", s, err)
	case old.ino == cur.ino:
		old.f.Close()
		return cur, nil, nil
	}
	return cur, old, nil
}

// Read calls fn with every entry of the log s in the store dir, oldest
// first.
func Read(dir string, s Stream, fn func(Line) error) error {
	cur, old, err := openLog(dir, s)
	if err != nil {
		return err
	}
	defer cur.f.Close()
	if old != nil {
		err := old.readLines(fn)
		old.f.Close()
		if err != nil {
			return err
		}
	}
	return cur.readLines(fn)
}

// Follow is Read, and then calls fn with each entry appended later,
// looking every poll, until ctx is done (it returns nil) or the log is
// gone (ErrGone). idle is called whenever everything written so far
// has been read, before waiting.
func Follow(ctx context.Context, dir string, s Stream, poll time.Duration, fn func(Line) error, idle func() error) error {
	cur, old, err := openLog(dir, s)
	if err != nil {
		return err
	}
	defer func() { cur.f.Close() }()
	if old != nil {
		err := old.readLines(fn)
		old.f.Close()
		if err != nil {
			return err
		}
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if err := cur.readLines(fn); err != nil {
			return err
		}
		// A rotation renamed the file being read: finish it, go on
		// with the new one.
		next, err := openSegment(filepath.Join(dir, s.cur()))
		switch {
		case errors.Is(err, os.ErrNotExist):
			if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
				return ErrGone
			}
			next = nil // a rotation is under way: look again
		case err != nil:
			return fmt.Errorf("reading %s: %w", s, err)
		case next.ino != cur.ino:
			if err := cur.readLines(fn); err != nil {
				next.f.Close()
				return err
			}
			cur.f.Close()
			cur = next
			continue
		}
		if next != nil {
			next.f.Close()
		}
		if err := idle(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
