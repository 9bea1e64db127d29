package overlay

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkOpenViewUsage measures what counting the usage adds to
// opening a view (a mount, a restore's reload) of a branch of 100,000
// files of 100 bytes in 100 directories: without limits, the files are
// counted from the entries; with a byte limit, every file's object is
// also stat'ed once.
//
//	go test -run '^$' -bench OpenViewUsage -benchtime 5x ./overlay/
func BenchmarkOpenViewUsage(b *testing.B) {
	const dirs, files = 100, 1000
	e := newEnv(b, nil)
	data := make([]byte, 100)
	for i := range dirs {
		d, _, err := e.view.Mkdir(e.view.Root(), fmt.Sprintf("d%03d", i), 0o755, Caller{})
		if err != nil {
			b.Fatal(err)
		}
		for j := range files {
			n, f, _, err := e.view.Create(d, fmt.Sprintf("f%04d", j), unix.O_CREAT|unix.O_WRONLY, 0o644, Caller{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.WriteAt(data, 0); err != nil {
				b.Fatal(err)
			}
			if err := f.Release(); err != nil {
				b.Fatal(err)
			}
			e.view.Forget(n, 1)
		}
	}
	if err := e.view.Sync(); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		limits Limits
	}{{"no-limits", Limits{}}, {"files-limit", Limits{Files: 300000}}, {"bytes-limit", Limits{Files: 300000, Bytes: 1 << 40}}} {
		b.Run(tc.name, func(b *testing.B) {
			e.limits = tc.limits
			for b.Loop() {
				e.reopen()
			}
			u := e.view.Usage()
			if u.Files != dirs*files+dirs || u.Bytes != dirs*files*100 {
				b.Fatalf("usage %+v, want %d files and %d bytes", u, dirs*files+dirs, dirs*files*100)
			}
		})
	}
}
