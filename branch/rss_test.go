package branch

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/internal/testenv"
)

func init() { childModes["rss"] = childRSS }

const rssEntries = 100_000

// childRSS commits rssEntries entries in batches of 1,000, closes,
// reopens, loads them all, and prints its peak and current RSS in KiB.
func childRSS(dir string) error {
	l, err := openMain(Options{Dir: dir})
	if err != nil {
		return err
	}
	s := l.s
	var b Batch
	for i := range rssEntries {
		ino, err := s.AllocIno()
		if err != nil {
			return err
		}
		b.Put(fmt.Sprintf("src/pkg%03d/file%05d.go", i/1000, i), &Entry{Type: TypeFile, Ino: ino, Object: fmt.Sprintf("%016x", ino)})
		if b.Len() == 1000 {
			if err := l.Commit(&b); err != nil {
				return err
			}
			b.Reset()
		}
	}
	if err := s.Close(); err != nil {
		return err
	}
	if l, err = openMain(Options{Dir: dir}); err != nil {
		return err
	}
	s = l.s
	n := 0
	if err := l.Load(func(string, *Entry) error { n++; return nil }); err != nil {
		return err
	}
	if n != rssEntries {
		return fmt.Errorf("loaded %d entries, want %d", n, rssEntries)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") || strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "RssAnon:") || strings.HasPrefix(line, "RssFile:") {
			fmt.Println(strings.Join(strings.Fields(line), " "))
		}
	}
	return s.Close()
}

// TestRSS measures the peak RSS of a process that commits and reloads
// 100,000 entries (the daemon's budget is 150 MiB in all).
func TestRSS(t *testing.T) {
	if testing.Short() {
		testenv.SkipByDesign(t, "-short: commits 100,000 entries")
	}
	if raceEnabled {
		testenv.SkipByDesign(t, "the race detector multiplies memory use")
	}
	c := startChild(t, "rss", t.TempDir())
	kib := map[string]int{}
	for line := c.line(); line != ""; line = c.line() {
		f := strings.Fields(line)
		if len(f) == 3 {
			kib[f[0]], _ = strconv.Atoi(f[1])
		}
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v (%s)", err, c.errb)
	}
	hwm := kib["VmHWM:"]
	t.Logf("%d entries committed and reloaded: peak RSS %.1f MiB, RSS at the end %.1f MiB", rssEntries, float64(hwm)/1024, float64(kib["VmRSS:"])/1024)
	if hwm == 0 || hwm > 100<<10 {
		t.Errorf("peak RSS %d KiB, want at most 100 MiB of the daemon's 150 MiB", hwm)
	}
}
