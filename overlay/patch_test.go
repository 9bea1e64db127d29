package overlay

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func patchOf(t *testing.T, a, b *FS, p string) string {
	t.Helper()
	var out strings.Builder
	if err := Patch(a, b, Change{Path: p}, &out); err != nil {
		t.Fatalf("Patch %s: %v", p, err)
	}
	return out.String()
}

func TestPatch(t *testing.T) {
	e := newEnv(t, map[string]string{
		"d/text": "one\ntwo\nthree\n", "bin": "\x00\x01", "latin1": "caf\xe9\n", "gone": "bye\n",
		"same": "same\n", "long": strings.Repeat("é", 5000) + "\n",
	})
	e.write("d/text", "one\n2\nthree")
	e.write("bin", "\x00\x02")
	e.write("latin1", "caf\xe8\n")
	e.write("same", "other\n")
	e.write("same", "same\n")
	e.write("long", strings.Repeat("é", 5000)+"!\n")
	if err := e.view.Unlink(e.view.Root(), "gone"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.view.Create(e.view.Root(), "new", unix.O_RDWR, 0644, Caller{}); err != nil {
		t.Fatal(err)
	}
	e.write("new", "hi\n")
	l := e.lowerView()
	for _, c := range []struct{ path, want string }{
		{"d/text", "--- a/d/text\n+++ b/d/text\n@@ -1,3 +1,3 @@\n one\n-two\n-three\n+2\n+three\n\\ No newline at end of file\n"},
		{"bin", "Binary files a/bin and b/bin differ\n"},
		{"latin1", "Binary files a/latin1 and b/latin1 differ\n"},
		{"gone", "--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"},
		{"new", "--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+hi\n"},
		{"same", ""},
		{"d", ""},
		{"long", "--- a/long\n+++ b/long\n@@ -1 +1 @@\n-" + strings.Repeat("é", 5000) + "\n+" + strings.Repeat("é", 5000) + "!\n"},
	} {
		if got := patchOf(t, l.view, e.view, c.path); got != c.want {
			t.Errorf("patch of %s:\n%s\nwant:\n%s", c.path, got, c.want)
		}
	}
}

func TestIsTextAcrossChunks(t *testing.T) {
	e := newEnv(t, map[string]string{
		// A 2-byte rune cut by the 64 KiB read boundary, then a bad byte far from the start.
		"cut":  strings.Repeat("a", 64<<10-1) + "é",
		"bad":  strings.Repeat("a", 100<<10) + "\xff",
		"nul9": strings.Repeat("a", 9<<10) + "\x00",
	})
	for name, want := range map[string]bool{"cut": true, "bad": false, "nul9": true} {
		f, err := e.view.openData(e.must(name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := isText(f)
		f.Close()
		if err != nil || got != want {
			t.Errorf("isText(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
}
