package integration

// Records in the agent-snapshot format: a scripted agent runs under
// agentfs run --record DIR and reads, creates, modifies, deletes and
// renames files of a Git project (tracked, dirty, untracked, ignored);
// the bundle it leaves is read back with an independent Parquet reader
// (DuckDB, through its npm package, which make deps installs in
// integration/duckdb) and its manifest as plain JSON, and both are
// checked field by field against what the script did. agentfs record -s
// writes the same bundle after the fact; bad input is refused.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
)

// The bundle as the format describes it (decoded with unknown fields
// refused).
type bundleManifest struct {
	Command         []string `json:"command"`
	ExitStatus      *int     `json:"exit_status"`
	StartCwd        string   `json:"start_cwd"`
	Uid             *uint32  `json:"uid"`
	Gid             *uint32  `json:"gid"`
	GitRepositories []struct {
		Root string `json:"root"`
		Head string `json:"head"`
	} `json:"git_repositories"`
	Files []bundleFile `json:"files"`
}

type bundleFile struct {
	Path       string      `json:"path"`
	Operations []string    `json:"operations"`
	Before     bundleState `json:"before"`
	After      bundleState `json:"after"`
	Git        *struct {
		InRepo       bool   `json:"in_repo"`
		Root         string `json:"root"`
		Head         string `json:"head"`
		RelativePath string `json:"relative_path"`
		Tracked      bool   `json:"tracked"`
		Dirty        bool   `json:"dirty"`
		Ignored      bool   `json:"ignored"`
	} `json:"git"`
}

type bundleState struct {
	Exists    bool    `json:"exists"`
	Tombstone bool    `json:"tombstone"`
	Type      string  `json:"type"`
	Mode      *uint32 `json:"mode"`
	Mtime     *int64  `json:"mtime"`
	Blob      string  `json:"blob"`
}

// duckRead is what integration/duckdb/read-parquet.mjs prints of a
// Parquet file.
type duckRead struct {
	Rows []struct {
		Key         string `json:"key"`
		Content     string `json:"content"` // base64
		KeyType     string `json:"key_type"`
		ContentType string `json:"content_type"`
	} `json:"rows"`
	Chunks []struct {
		RowGroup    string `json:"row_group_id"`
		Column      string `json:"path_in_schema"`
		Compression string `json:"compression"`
	} `json:"chunks"`
}

// readParquetWithDuckDB reads file with DuckDB and returns its blobs by
// key, failing on anything the format does not allow.
func readParquetWithDuckDB(t *testing.T, file string) (map[string]string, duckRead) {
	t.Helper()
	node := testenv.RequireProgram(t, "node")
	dir, err := filepath.Abs("duckdb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api")); err != nil {
		testenv.Skip(t, testenv.Condition("the npm package @duckdb/node-api"), "DuckDB reads the records' Parquet files: make deps installs it in %s (%v)", dir, err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "read-parquet.mjs"), file)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("DuckDB reading %s: %v\n%s", file, err, stderr.String())
	}
	var r duckRead
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("DuckDB's output: %v\n%s", err, out)
	}
	blobs := map[string]string{}
	for _, row := range r.Rows {
		if row.KeyType != "VARCHAR" || row.ContentType != "BLOB" {
			t.Errorf("row %s: key is %s and content %s, want VARCHAR and BLOB", row.Key, row.KeyType, row.ContentType)
		}
		b, err := base64.StdEncoding.DecodeString(row.Content)
		if err != nil {
			t.Fatalf("row %s: %v", row.Key, err)
		}
		if _, dup := blobs[row.Key]; dup {
			t.Errorf("blob %s twice", row.Key)
		}
		blobs[row.Key] = string(b)
	}
	if len(r.Chunks) == 0 {
		t.Errorf("%s has no column chunks", file)
	}
	for _, c := range r.Chunks {
		if c.Compression != "SNAPPY" {
			t.Errorf("row group %s, column %s: compression %s, want SNAPPY", c.RowGroup, c.Column, c.Compression)
		}
	}
	return blobs, r
}

// readManifest decodes manifest.json strictly, and returns it raw too.
func readManifest(t *testing.T, dir string) (bundleManifest, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m bundleManifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("manifest.json: %v\n%s", err, raw)
	}
	return m, raw
}

const recordAgentScript = `set -e
cat a.txt dirty.txt notes.txt build.log > /dev/null
echo more >> src/main.go
echo "new file" > new.txt
rm b.txt
mv old.txt moved.txt
test -e missing.txt || true
ls src > /dev/null
echo appended >> build.log
ln -s a.txt link
stat -c '%n %f %Y' a.txt dirty.txt notes.txt build.log src/main.go new.txt moved.txt src link > "$1"
exit 3
`

// afterStat is the type and mode (st_mode) and mtime of a path as the
// script saw them at its end.
type afterStat struct {
	mode  uint32
	mtime int64
}

func readAfterStats(t *testing.T, p string) map[string]afterStat {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]afterStat{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("stat line %q", l)
		}
		mode, err1 := strconv.ParseUint(f[1], 16, 32)
		mtime, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("stat line %q", l)
		}
		out[f[0]] = afterStat{uint32(mode), mtime}
	}
	return out
}

// TestRunRecord: agentfs run --record writes the bundle of a scripted
// agent's run, which DuckDB and a JSON check accept field by field;
// agentfs record -s writes the same bundle afterwards.
func TestRunRecord(t *testing.T) {
	e := newRunEnv(t)
	// The project: tracked files (a.txt clean, dirty.txt changed since
	// the commit, b.txt, src/main.go), an untracked one (notes.txt, and
	// old.txt that the agent renames), an ignored one (build.log).
	harness.WriteFile(t, filepath.Join(e.project, ".gitignore"), "*.log\n")
	harness.WriteFile(t, filepath.Join(e.project, "dirty.txt"), "committed\n")
	e.git("add", "-A")
	e.git("commit", "-qm", "second")
	harness.WriteFile(t, filepath.Join(e.project, "dirty.txt"), "dirty before the run\n")
	harness.WriteFile(t, filepath.Join(e.project, "notes.txt"), "untracked notes\n")
	harness.WriteFile(t, filepath.Join(e.project, "build.log"), "ignored log\n")
	harness.WriteFile(t, filepath.Join(e.project, "old.txt"), "untracked, to be renamed\n")
	head := strings.TrimSpace(e.git("rev-parse", "HEAD")) // git reads without O_NOATIME: before the project's tree is taken
	e.before = harness.SnapshotTree(e.project)
	beforeStat := map[string]unix.Stat_t{}
	for _, p := range []string{"a.txt", "b.txt", "dirty.txt", "notes.txt", "build.log", "old.txt", "src/main.go", "src"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(e.project, p), &st); err != nil {
			t.Fatal(err)
		}
		beforeStat[p] = st
	}

	script := e.script("agent.sh", recordAgentScript)
	stats := filepath.Join(e.scripts, "after-stats")
	bundle := filepath.Join(t.TempDir(), "bundle")
	r := e.agentfs("run", "--record", bundle, "--", script, stats)
	if r.Code != 3 {
		t.Fatalf("agentfs run --record: exit %d, want the command's 3\n%s", r.Code, r)
	}
	id := sessionIDOf(t, r)
	if !strings.Contains(r.Stderr, "the record of session "+id+" is in "+bundle) {
		t.Errorf("agentfs run does not say where the record is:\n%s", r.Stderr)
	}
	after := readAfterStats(t, stats)
	m, raw := readManifest(t, bundle)
	blobs, _ := readParquetWithDuckDB(t, filepath.Join(bundle, "blobs.parquet"))

	// The top level.
	if !slices.Equal(m.Command, []string{script, stats}) || m.ExitStatus == nil || *m.ExitStatus != 3 || m.StartCwd != e.project ||
		m.Uid == nil || *m.Uid != uint32(os.Getuid()) || m.Gid == nil || *m.Gid != uint32(os.Getgid()) {
		t.Errorf("manifest top level: command %q exit %s cwd %q uid %v gid %v", m.Command, intp(m.ExitStatus), m.StartCwd, m.Uid, m.Gid)
	}
	if len(m.GitRepositories) != 1 || m.GitRepositories[0].Root != e.project || m.GitRepositories[0].Head != head {
		t.Errorf("git_repositories = %+v, want one: %s at %s", m.GitRepositories, e.project, head)
	}

	type want struct {
		ops []string // the operations that must be there; a lookup may add existence (directory for a directory)
		// before/after: "" missing, else the blob's contents ("-" for
		// none); tombstone for a deleted path.
		before, after             string
		beforeExists, afterExists bool
		tombstone                 bool
		tracked, dirty, ignored   bool
		exactOps                  bool
	}
	const none = "-"
	wants := map[string]want{
		"a.txt":       {ops: []string{"read"}, beforeExists: true, before: none, afterExists: true, after: none, tracked: true},
		"dirty.txt":   {ops: []string{"read"}, beforeExists: true, before: "dirty before the run\n", afterExists: true, after: "dirty before the run\n", tracked: true, dirty: true},
		"notes.txt":   {ops: []string{"read"}, beforeExists: true, before: "untracked notes\n", afterExists: true, after: "untracked notes\n"},
		"build.log":   {ops: []string{"read", "write"}, beforeExists: true, before: "ignored log\n", afterExists: true, after: "ignored log\nappended\n", ignored: true},
		"src/main.go": {ops: []string{"write"}, beforeExists: true, before: none, afterExists: true, after: "package main\nmore\n", tracked: true},
		"new.txt":     {ops: []string{"write"}, afterExists: true, after: "new file\n"},
		"b.txt":       {ops: []string{"delete"}, beforeExists: true, before: none, tombstone: true, tracked: true},
		"old.txt":     {ops: []string{"delete"}, beforeExists: true, before: "untracked, to be renamed\n", tombstone: true},
		"moved.txt":   {ops: []string{"write"}, afterExists: true, after: "untracked, to be renamed\n"},
		"missing.txt": {ops: []string{"existence"}, exactOps: true},
		"link":        {ops: []string{"write"}, afterExists: true, after: none},
		"src":         {ops: []string{"directory"}, beforeExists: true, before: none, afterExists: true, after: none, tracked: true, exactOps: true},
	}
	var paths, wantPaths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	for p := range wants {
		wantPaths = append(wantPaths, filepath.Join(e.project, p))
	}
	slices.Sort(wantPaths)
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("the record's paths:\n%q\nwant (what the script touched, sorted):\n%q", paths, wantPaths)
	}
	blobKeys := map[string]bool{}
	for _, f := range m.Files {
		p, _ := filepath.Rel(e.project, f.Path)
		w, ok := wants[p]
		if !ok {
			continue
		}
		// Operations: the ones the script did, in the format's order,
		// and at most an existence check (a directory traversal) more.
		extra := "existence"
		if p == "src" {
			extra = "directory"
		}
		got := slices.DeleteFunc(slices.Clone(f.Operations), func(op string) bool { return op == extra && !slices.Contains(w.ops, op) })
		if !slices.Equal(got, w.ops) || w.exactOps && len(f.Operations) != len(w.ops) {
			t.Errorf("%s: operations %q, want %q", p, f.Operations, w.ops)
		}
		if order := []string{"read", "write", "existence", "directory", "delete"}; !slices.IsSortedFunc(f.Operations, func(a, b string) int {
			return slices.Index(order, a) - slices.Index(order, b)
		}) {
			t.Errorf("%s: operations %q out of the format's order", p, f.Operations)
		}
		// The before-state: the project as it was.
		if f.Before.Exists != w.beforeExists || f.Before.Tombstone {
			t.Errorf("%s: before %+v, want exists %v", p, f.Before, w.beforeExists)
		}
		if w.beforeExists {
			st := beforeStat[p]
			if f.Before.Mode == nil || *f.Before.Mode != st.Mode || f.Before.Mtime == nil || *f.Before.Mtime != st.Mtim.Sec || f.Before.Type != typeName(st.Mode) {
				t.Errorf("%s: before %+v, want type %s mode %d mtime %d", p, f.Before, typeName(st.Mode), st.Mode, st.Mtim.Sec)
			}
		} else if f.Before.Mode != nil || f.Before.Mtime != nil || f.Before.Type != "" || f.Before.Blob != "" {
			t.Errorf("%s: the before-state of a missing path has attributes: %+v", p, f.Before)
		}
		// The after-state: what the script saw at its end.
		if f.After.Exists != w.afterExists || f.After.Tombstone != w.tombstone {
			t.Errorf("%s: after %+v, want exists %v tombstone %v", p, f.After, w.afterExists, w.tombstone)
		}
		if w.afterExists {
			st, ok := after[p]
			if !ok {
				t.Fatalf("%s: the script did not stat it", p)
			}
			if f.After.Mode == nil || *f.After.Mode != st.mode || f.After.Mtime == nil || *f.After.Mtime != st.mtime || f.After.Type != typeName(st.mode) {
				t.Errorf("%s: after %+v, want type %s mode %d mtime %d", p, f.After, typeName(st.mode), st.mode, st.mtime)
			}
		} else if f.After.Mode != nil || f.After.Type != "" || f.After.Blob != "" {
			t.Errorf("%s: the after-state of a missing path has attributes: %+v", p, f.After)
		}
		// The contents, through DuckDB.
		for _, s := range []struct {
			state, blob, want string
		}{{"before", f.Before.Blob, w.before}, {"after", f.After.Blob, w.after}} {
			switch {
			case s.want == "" || s.want == none:
				if s.blob != "" {
					t.Errorf("%s: %s-blob %q, want none", p, s.state, s.blob)
				}
			case s.blob != s.state+":"+f.Path:
				t.Errorf("%s: %s-blob %q, want %q", p, s.state, s.blob, s.state+":"+f.Path)
			case blobs[s.blob] != s.want:
				t.Errorf("%s: DuckDB reads %s as %q, want %q", p, s.blob, blobs[s.blob], s.want)
			}
			if s.blob != "" {
				blobKeys[s.blob] = true
			}
		}
		// The Git classification.
		g := f.Git
		if g == nil {
			t.Errorf("%s: no git classification", p)
			continue
		}
		if !g.InRepo || g.Root != e.project || g.Head != head || g.RelativePath != p || g.Tracked != w.tracked || g.Dirty != w.dirty || g.Ignored != w.ignored {
			t.Errorf("%s: git %+v, want tracked %v dirty %v ignored %v in %s at %s", p, *g, w.tracked, w.dirty, w.ignored, e.project, head)
		}
	}
	for k := range blobs {
		if !blobKeys[k] {
			t.Errorf("blobs.parquet holds %s, which no state names", k)
		}
	}
	// States as the format writes them.
	for _, s := range []string{`"after": {
        "exists": false,
        "tombstone": true
      }`, `"before": {
        "exists": false
      }`} {
		if !strings.Contains(string(raw), s) {
			t.Errorf("manifest.json has no state written as %s:\n%s", s, raw)
		}
	}

	// After the fact: the same bundle.
	again := filepath.Join(t.TempDir(), "again")
	if r := e.agentfs("record", "-s", id, "--to", again); r.Code != 0 {
		t.Fatalf("agentfs record -s:\n%s", r)
	}
	_, raw2 := readManifest(t, again)
	if !bytes.Equal(raw, raw2) {
		t.Errorf("agentfs record -s wrote another manifest:\n%s\nthan agentfs run --record:\n%s", raw2, raw)
	}
	blobs2, _ := readParquetWithDuckDB(t, filepath.Join(again, "blobs.parquet"))
	if len(blobs2) != len(blobs) {
		t.Errorf("agentfs record -s wrote %d blobs, agentfs run --record %d", len(blobs2), len(blobs))
	}
	for k, v := range blobs {
		if blobs2[k] != v {
			t.Errorf("blob %s: %q after the fact, %q at the end of the run", k, blobs2[k], v)
		}
	}
}

// typeName is the format's name of the type in st_mode m.
func typeName(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// TestRecordBadInput: a record directory that is not empty or is in
// the project, an unknown session, a session run without reads logged:
// clear errors, and nothing written.
func TestRecordBadInput(t *testing.T) {
	e := newRunEnv(t)
	full := t.TempDir()
	harness.WriteFile(t, filepath.Join(full, "keep"), "mine")
	nsessions := func() int { return len(e.sessions("--all")) }

	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"run into a full directory", []string{"run", "--record", full, "--", "true"}, 1, "is not empty"},
		{"run into the project", []string{"run", "--record", filepath.Join(e.project, "rec"), "--", "true"}, 1, "inside the project"},
		{"record an unknown session", []string{"record", "-s", "nosuch", "--to", filepath.Join(t.TempDir(), "r")}, 1, `no session "nosuch"`},
		{"record without a directory", []string{"record", "-s", "nosuch"}, 2, "--to DIR"},
		{"record without a session", []string{"record", "--to", "/tmp/x"}, 2, "-s SESSION"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := nsessions()
			r := e.agentfs(c.args...)
			if r.Code != c.code || !strings.Contains(r.Stderr, c.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", r.Code, c.code, c.want, r)
			}
			if got := nsessions(); got != n {
				t.Errorf("%d sessions after, %d before: a refused run made one", got, n)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(e.project, "rec")); err == nil {
		t.Errorf("a record directory was made in the project")
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || string(b) != "mine" {
		t.Errorf("the full directory's file: %q, %v", b, err)
	}

	// A session run without reads logged cannot be recorded; with
	// them, into a full directory neither.
	r := e.agentfs("run", "--", "cat", "a.txt")
	if r.Code != 0 {
		t.Fatalf("agentfs run:\n%s", r)
	}
	id := sessionIDOf(t, r)
	to := filepath.Join(t.TempDir(), "r")
	r = e.agentfs("record", "-s", id, "--to", to)
	if r.Code != 1 || !strings.Contains(r.Stderr, "ran without reads logged") || !strings.Contains(r.Stderr, "agentfs run --record") {
		t.Errorf("record of a session without reads logged: want exit 1 naming the fix:\n%s", r)
	}
	if _, err := os.Stat(to); err == nil {
		t.Errorf("the refused record made %s", to)
	}
	r = e.agentfs("run", "--log-reads", "--", "cat", "a.txt")
	if r.Code != 0 {
		t.Fatalf("agentfs run --log-reads:\n%s", r)
	}
	r = e.agentfs("record", "-s", sessionIDOf(t, r), "--to", full)
	if r.Code != 1 || !strings.Contains(r.Stderr, "is not empty") {
		t.Errorf("record into a full directory: want exit 1:\n%s", r)
	}
	if names, _ := os.ReadDir(full); len(names) != 1 {
		t.Errorf("the full directory holds %d names after a refused record, want 1", len(names))
	}
}
