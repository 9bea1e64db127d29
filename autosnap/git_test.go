package autosnap

import (
	"bytes"
	"compress/zlib"
	"fmt"
	iofs "io/fs"
	"testing"
)

// fakeRepo is the files of a mount, for GitLabel.
type fakeRepo map[string][]byte

func (r fakeRepo) read(p string) ([]byte, error) {
	if b, ok := r[p]; ok {
		return b, nil
	}
	return nil, iofs.ErrNotExist
}

// addCommit stores a loose commit object with message msg at dir.
func (r fakeRepo) addCommit(dir, hash, msg string) {
	body := "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor A <a@b> 0 +0000\ncommitter A <a@b> 0 +0000\n\n" + msg
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	fmt.Fprintf(zw, "commit %d\x00%s", len(body), body)
	if err := zw.Close(); err != nil {
		panic(err) // into a bytes.Buffer: cannot fail
	}
	r[dir+"/objects/"+hash[:2]+"/"+hash[2:]] = buf.Bytes()
}

const (
	hashA = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
	hashB = "0123456789abcdef0123456789abcdef01234567"
)

func TestParseGitRef(t *testing.T) {
	for _, tc := range []struct {
		path string
		want GitRef
		ok   bool
	}{
		{".git/refs/heads/main", GitRef{Name: "refs/heads/main"}, true},
		{".git/refs/heads/feature/x", GitRef{Name: "refs/heads/feature/x"}, true},
		{".git/refs/tags/v1", GitRef{Name: "refs/tags/v1"}, true},
		{".git/HEAD", GitRef{Name: "HEAD"}, true},
		{".git/packed-refs", GitRef{Name: "packed-refs"}, true},
		{"sub/repo/.git/refs/heads/main", GitRef{Repo: "sub/repo", Name: "refs/heads/main"}, true},
		{".git/refs/heads/main.lock", GitRef{}, false},
		{".git/HEAD.lock", GitRef{}, false},
		{".git/refs/remotes/origin/main", GitRef{}, false},
		{".git/refs/heads", GitRef{}, false},
		{".git/index", GitRef{}, false},
		{"refs/heads/main", GitRef{}, false},
		{"src/HEAD", GitRef{}, false},
	} {
		got, ok := ParseGitRef(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseGitRef(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestGitLabel(t *testing.T) {
	r := fakeRepo{
		".git/refs/heads/main": []byte(hashA + "\n"),
		".git/HEAD":            []byte("ref: refs/heads/main\n"),
		".git/refs/tags/v1":    []byte(hashB + "\n"),
		".git/packed-refs":     []byte("# pack-refs with: peeled\n" + hashB + " refs/heads/old\n"),
		"sub/.git/HEAD":        []byte(hashB + "\n"),
	}
	r.addCommit(".git", hashA, "fix the parser\n\nThe long story.\n")
	r.addCommit("sub/.git", hashB, "detached work\n")
	for _, tc := range []struct {
		ref  GitRef
		want string
	}{
		{GitRef{Name: "refs/heads/main"}, "git commit 1a2b3c4 on main: fix the parser"},
		{GitRef{Name: "HEAD"}, "git checkout main at 1a2b3c4: fix the parser"},
		{GitRef{Name: "refs/tags/v1"}, "git tag v1 at 0123456"},
		{GitRef{Name: "refs/heads/old"}, "git commit 0123456 on old"}, // packed, no loose object
		{GitRef{Name: "refs/heads/gone"}, "git branch gone deleted"},
		{GitRef{Name: "refs/tags/gone"}, "git tag gone deleted"},
		{GitRef{Name: "packed-refs"}, "git refs packed"},
		{GitRef{Repo: "sub", Name: "HEAD"}, "git commit 0123456 in sub (detached HEAD): detached work"},
	} {
		if got := GitLabel(r.read, tc.ref); got != tc.want {
			t.Errorf("GitLabel(%+v) = %q, want %q", tc.ref, got, tc.want)
		}
	}
	d := Due{Refs: []GitRef{{Name: "refs/tags/v1"}, {Name: "refs/heads/main"}}, Paths: []string{"a.go"}}
	if got, want := d.Label(r.read), "git commit 1a2b3c4 on main: fix the parser (and 1 more ref)"; got != want {
		t.Errorf("Due.Label = %q, want %q", got, want)
	}
}

func TestGitLabelBadObject(t *testing.T) {
	r := fakeRepo{".git/refs/heads/main": []byte(hashA)}
	r[".git/objects/1a/"+hashA[2:]] = []byte("not zlib")
	if got, want := GitLabel(r.read, GitRef{Name: "refs/heads/main"}), "git commit 1a2b3c4 on main"; got != want {
		t.Errorf("GitLabel = %q, want %q", got, want)
	}
	r[".git/refs/heads/main"] = []byte("garbage")
	if got, want := GitLabel(r.read, GitRef{Name: "refs/heads/main"}), "git branch main deleted"; got != want {
		t.Errorf("GitLabel of a bad ref = %q, want %q", got, want)
	}
}
