package hide

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func mustRules(t *testing.T, ps ...Pattern) *Rules {
	t.Helper()
	r, err := New(ps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestHidden(t *testing.T) {
	r := mustRules(t,
		Pattern{".env", FromUser}, Pattern{"*.pem", FromUser}, Pattern{"secrets/", FromUser},
		Pattern{"/config/prod.key", FromProject})
	for _, c := range []struct {
		p     string
		isDir bool
		want  bool
	}{
		{".env", false, true},
		{"app/.env", false, true},
		{".env.example", false, false},
		{"certs/server.pem", false, true},
		{"secrets", true, true},
		{"secrets", false, false}, // a file named secrets: "secrets/" matches directories
		{"secrets/a/b.txt", false, true},
		{"x/secrets/y", false, true},
		{"config/prod.key", false, true},
		{"a/config/prod.key", false, false},
		{"main.go", false, false},
		{"", true, false},
		{".", true, false},
	} {
		if got := r.Hidden(c.p, c.isDir); got != c.want {
			t.Errorf("Hidden(%q, dir %v) = %v, want %v", c.p, c.isDir, got, c.want)
		}
	}
	var none *Rules
	if !none.Empty() || none.Hidden(".env", false) {
		t.Errorf("nil rules hide something")
	}
}

// TestLayersCannotWeaken checks that a project's (or the command
// line's) negation cannot take back what the user's patterns hide,
// while a negation within one layer works as in gitignore.
func TestLayersCannotWeaken(t *testing.T) {
	r := mustRules(t, Pattern{"*.pem", FromUser},
		Pattern{"!server.pem", FromProject}, Pattern{"*.key", FromProject}, Pattern{"!public.key", FromProject},
		Pattern{"!*.pem", FromFlag})
	for p, want := range map[string]bool{"server.pem": true, "a.pem": true, "x.key": true, "public.key": false} {
		if got := r.Hidden(p, false); got != want {
			t.Errorf("Hidden(%q) = %v, want %v", p, got, want)
		}
	}
	// Inside a hidden directory nothing is taken back, even in its layer.
	r = mustRules(t, Pattern{"secrets/", FromUser}, Pattern{"!secrets/ok.txt", FromUser})
	if !r.Hidden("secrets/ok.txt", false) {
		t.Errorf("secrets/ok.txt taken back from a hidden directory")
	}
}

func TestNewRefuses(t *testing.T) {
	for _, ps := range [][]Pattern{
		{{"", FromFlag}},
		{{"# comment", FromUser}},
		{{"[abc", FromProject}},
		{{".env", "agent"}},
	} {
		if _, err := New(ps); err == nil {
			t.Errorf("New(%q) = nil error, want one", ps)
		}
	}
}

func TestMarshal(t *testing.T) {
	ps := []Pattern{{".env", FromUser}, {"!x.pem", FromProject}, {"*.pem", FromFlag}}
	r := mustRules(t, ps...)
	back, err := Unmarshal(r.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Patterns(); !slices.Equal(got, ps) {
		t.Errorf("patterns after Unmarshal = %v, want %v", got, ps)
	}
	if !back.Hidden("a.pem", false) {
		t.Errorf("a.pem not hidden after Unmarshal")
	}
	if _, err := Unmarshal([]byte("{")); err == nil {
		t.Errorf("Unmarshal of garbage: no error")
	}
}

func TestScan(t *testing.T) {
	dir := t.TempDir()
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".env")
	write("src/main.go")
	write("secrets/deep/token")
	write("certs/a.pem")
	ino := func(p string) (uint64, uint64) {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, p), &st); err != nil {
			t.Fatal(err)
		}
		return st.Dev, st.Ino
	}
	r := mustRules(t, Pattern{".env", FromUser}, Pattern{"secrets/", FromUser}, Pattern{"*.pem", FromFlag})
	in, err := Scan(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".env", "secrets/deep/token", "certs/a.pem"} {
		if !in.Hides(ino(p)) {
			t.Errorf("Scan missed hidden %s", p)
		}
	}
	if in.Hides(ino("src/main.go")) {
		t.Errorf("Scan recorded visible src/main.go")
	}
	if in.Len() != 3 {
		t.Errorf("Scan recorded %d inodes, want 3", in.Len())
	}
	empty, err := Scan(nil, dir)
	if err != nil || empty.Len() != 0 {
		t.Errorf("Scan with no rules = %d inodes, %v; want none", empty.Len(), err)
	}
}

// BenchmarkHidden: judging one path three deep with four patterns in
// two layers.
func BenchmarkHidden(b *testing.B) {
	r, err := New([]Pattern{{".env", FromUser}, {"*.pem", FromUser}, {"secrets/", FromProject}, {"/config/prod.key", FromFlag}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		r.Hidden("src/pkg/file0001.go", false)
	}
}
