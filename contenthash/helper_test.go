package contenthash

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfs/agentfs/internal/testenv"
)

// helperEnv makes the test binary the hashing process (TestMain).
const helperEnv = "AGENTFS_TEST_RUN_HASH_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(RunHelper())
	}
	os.Exit(m.Run())
}

// TestHelperHoldsNoPrivilege: the hashing process started by root
// runs as nobody, with no groups and no capabilities, and may gain
// none; it still hashes the files it is handed (a file only root may
// read, here).
func TestHelperHoldsNoPrivilege(t *testing.T) {
	testenv.RequireRoot(t, "the hashing process drops root's privileges")
	t.Setenv(helperEnv, "1")
	p, err := startHelper([]string{os.Args[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.close() }()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("root's only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, n, err := p.hash(f)
	if err != nil || n != 12 || sum != sha256.Sum256([]byte("root's only\n")) {
		t.Fatalf("hash = %x, %d, %v", sum, n, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Uid:":        fmt.Sprintf("%d\t%d\t%d\t%d", nobody, nobody, nobody, nobody),
		"Gid:":        fmt.Sprintf("%d\t%d\t%d\t%d", nobody, nobody, nobody, nobody),
		"Groups:":     "",
		"CapEff:":     "0000000000000000",
		"CapPrm:":     "0000000000000000",
		"NoNewPrivs:": "1",
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "\t")
		if w, ok := want[k]; ok {
			if strings.TrimSpace(v) != w {
				t.Errorf("the hashing process's %s %q, want %q", k, strings.TrimSpace(v), w)
			}
			delete(want, k)
		}
	}
	if len(want) != 0 {
		t.Errorf("not in its status: %v", want)
	}
}

// TestPauseStopsTheHashingProcess: Pause(true) stops the hashing
// process (a file it is hashing waits), Pause(false) lets it go on, and
// closing a paused process does not hang.
func TestPauseStopsTheHashingProcess(t *testing.T) {
	t.Setenv(helperEnv, "1")
	p, err := startHelper([]string{os.Args[0]})
	if err != nil {
		t.Fatal(err)
	}
	h := &Hasher{helper: p}
	state := func() string {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid()))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...: comm may hold spaces, the state follows
		// the last ')'.
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
	}
	// A signal is delivered after kill(2) returns: wait for the state.
	waitState := func(what string, ok func(string) bool) {
		t.Helper()
		for range 2000 {
			if ok(state()) {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("%s: the hashing process is in state %s", what, state())
	}
	h.Pause(true)
	waitState("paused", func(s string) bool { return s == "T" })
	h.Pause(false)
	waitState("let go", func(s string) bool { return s != "T" })
	h.Pause(true)
	if err := p.close(); err != nil {
		t.Errorf("closing a paused hashing process: %v", err)
	}
}
