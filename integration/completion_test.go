package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfs/agentfs/integration/harness"
	"github.com/agentfs/agentfs/internal/testenv"
)

// Shell completion: the scripts of agentfs completion, loaded in bash
// (with bash-completion) and zsh (with compinit) as a user loads them,
// on a pseudo-terminal, and asked with TAB for a command, a flag and
// the snapshot id of a live mount; fish through its complete -C. Each
// completed line is run as printf '%s|\n' LINE, so that the output
// shows what TAB made of it (the typed line never has the |).

// requireShell returns the path of shell, which make deps installs;
// without it the test skips, or fails where everything must run (CI).
func requireShell(t *testing.T, shell, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(shell)
	if err != nil {
		testenv.Skip(t, testenv.Program(shell), "%s is missing: apt-get install %s (make deps installs it)", shell, pkg)
	}
	return p
}

// shellEnv is a clean environment for an interactive shell, with the
// agentfs under test first on PATH.
func shellEnv(t *testing.T) []string {
	home := t.TempDir()
	return []string{"PATH=" + filepath.Dir(harness.Bin()) + ":" + os.Getenv("PATH"), "HOME=" + home, "ZDOTDIR=" + home,
		"TERM=xterm", "LC_ALL=C", "PS1=$ ", "INPUTRC=/dev/null"}
}

// completionMount is a live mount with one snapshot, and its id.
func completionMount(t *testing.T) (*harness.Mount, string) {
	m := harness.NewMount(t, harness.WithLower(harness.LowerFile("a.txt", "a\n")))
	id := strings.TrimSpace(lastLine(mustC(t, m.Dir, "snapshot", "create", "-m", "for completion").Stdout))
	if len(id) < 8 {
		t.Fatalf("snapshot create printed no id: %q", id)
	}
	return m, id
}

// askByTab types each line, then TAB, then makes the shell print the
// completed line (Ctrl-A, printf), and waits for want.
func askByTab(tm *harness.Terminal, typed, want string) {
	tm.Send(typed + "\t\x01printf '%s|\\n' \r")
	tm.WaitFor(want + "|")
}

func TestCompletionBash(t *testing.T) {
	bash := requireShell(t, "bash", "bash")
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		requireShell(t, "no-bash-completion", "bash-completion")
	}
	m, id := completionMount(t)
	cmd := exec.Command(bash, "--norc", "--noprofile", "-i")
	cmd.Env = shellEnv(t)
	tm := harness.StartTerminal(t, cmd)
	tm.Send("source " + bashCompletion + "; source <(agentfs completion bash); cd " + m.Dir + "; echo RE''ADY\r")
	tm.WaitFor("READY")
	askByTab(tm, "agentfs snaps", "snapshot")
	askByTab(tm, "agentfs snapshot create --mes", "--message")
	askByTab(tm, "agentfs restore ", id)
	askByTab(tm, "agentfs branch switch ma", "main")
	tm.Send("exit\r")
	tm.Wait()
}

func TestCompletionZsh(t *testing.T) {
	zsh := requireShell(t, "zsh", "zsh")
	m, id := completionMount(t)
	cmd := exec.Command(zsh, "-f", "-i")
	cmd.Env = shellEnv(t)
	tm := harness.StartTerminal(t, cmd)
	tm.Send("autoload -U compinit; compinit -u; source <(agentfs completion zsh); cd " + m.Dir + "; echo RE''ADY\r")
	tm.WaitFor("READY")
	askByTab(tm, "agentfs snaps", "snapshot")
	askByTab(tm, "agentfs snapshot create --mes", "--message")
	askByTab(tm, "agentfs restore ", id)
	askByTab(tm, "agentfs branch switch ma", "main")
	tm.Send("exit\r")
	tm.Wait()
}

func TestCompletionFish(t *testing.T) {
	fish := requireShell(t, "fish", "fish")
	m, id := completionMount(t)
	cmd := exec.Command(fish, "--no-config", "-c", `agentfs completion fish | source; complete -C "agentfs snaps"; complete -C "agentfs snapshot create --mes"; complete -C "agentfs restore "`)
	cmd.Env = shellEnv(t)
	cmd.Dir = m.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fish: %v\n%s", err, out)
	}
	for _, want := range []string{"snapshot\t", "--message\t", id + "\t"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("fish's completions lack %q:\n%s", want, out)
		}
	}
}

// TestCompletionQuiet: where there is nothing to ask (no mount, no such
// session), __complete prints nothing and succeeds.
func TestCompletionQuiet(t *testing.T) {
	for _, args := range [][]string{
		{"__complete", "restore", ""},
		{"__complete", "diff", "-s", "no-such-session", ""},
		{"__complete", "branch", "switch", "-C", "/nonexistent", ""},
	} {
		cmd := exec.Command(harness.Bin(), args...)
		cmd.Dir = t.TempDir()
		r := harness.RunCmd(t, cmd, args)
		if r.Code != 0 || r.Stdout != "" || r.Stderr != "" {
			t.Errorf("want exit 0 and no output:\n%s", r)
		}
	}
}
