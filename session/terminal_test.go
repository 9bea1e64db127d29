package session

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// terminalEnv makes the test binary run terminalScenario, reporting to
// the file the variable names, instead of the tests.
const terminalEnv = "AGENTFS_TEST_TERMINAL"

// terminalScenario leads a session whose terminal is stdin, as agentfs
// run started from a shell does. It saves the terminal, then another
// process group (the shell, once agentfs run was suspended and resumed
// with bg) takes the foreground in its own modes (raw); the terminal is
// given back with the command not holding it. It reports the foreground
// and whether the modes are still raw.
func terminalScenario(report string) int {
	fail := func(format string, args ...any) int {
		_ = os.WriteFile(report, fmt.Appendf(nil, "error: "+format, args...), 0o644)
		return 1
	}
	tt := saveTerminal(os.Stdin)
	if tt == nil {
		return fail("the terminal was not saved")
	}
	shell := exec.Command("sleep", "60")
	shell.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := shell.Start(); err != nil {
		return fail("%v", err)
	}
	defer func() { _ = shell.Process.Kill() }() // a stand-in
	raw, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		return fail("%v", err)
	}
	raw.Lflag &^= unix.ICANON | unix.ECHO
	if err := unix.IoctlSetTermios(0, unix.TCSETS, raw); err != nil {
		return fail("%v", err)
	}
	signal.Ignore(syscall.SIGTTOU) // this process is in the background from here
	if err := unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, shell.Process.Pid); err != nil {
		return fail("%v", err)
	}
	restoreErr := tt.restore(false)
	fg, _ := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	tio, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		return fail("%v", err)
	}
	_ = os.WriteFile(report, fmt.Appendf(nil, "shell foreground %v raw %v error %v", fg == shell.Process.Pid, tio.Lflag&unix.ICANON == 0, restoreErr), 0o644)
	return 0
}

// TestTerminalRestoreLeavesOthersModes: giving the terminal back while
// another process group holds its foreground (the shell, agentfs run in
// the background) leaves that group the foreground and its modes.
func TestTerminalRestoreLeavesOthersModes(t *testing.T) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testenv.Skip(t, testenv.Pty, "no pseudo-terminal: %v", err)
	}
	defer master.Close() // the test's
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close() // the test's
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report")
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), terminalEnv+"="+report)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(report) // what it said, if anything
		t.Fatalf("the scenario: %v: %s", err, b)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), "shell foreground true raw true error <nil>"; got != want {
		t.Errorf("after restore with the shell in the foreground: %s; want %s (its modes left alone)", got, want)
	}
}
