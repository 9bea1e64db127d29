package main

import (
	"strings"
	"testing"

	"github.com/agentfs/agentfs/cli"
)

func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  []string // among the lines printed
		not   []string // not among them
	}{
		{[]string{""}, []string{"mount\tmount a copy-on-write view of a project", "snapshot\t", "completion\t", "help\t"}, []string{"__complete"}},
		{[]string{"sn"}, []string{"snapshot\t"}, []string{"mount\t"}},
		{[]string{"snapshot", ""}, []string{"create\t", "delete\t", "list\t", "prune\t"}, nil},
		{[]string{"snapshot", "create", "--m"}, []string{"--message\ta LABEL that says what the snapshot holds"}, []string{"--branch\t"}},
		{[]string{"mount", "-"}, []string{"--lower\t", "--store\t", "--backstore\t"}, []string{"--ephemeral\t", "--ready-fd\t"}},
		{[]string{"mount", "--backstore", ""}, []string{"hostfs\t", "ramdisk\t"}, nil},
		{[]string{"mount", "--lower", ""}, []string{":dirs"}, nil},
		{[]string{"mount", "--lower", "/x", ""}, []string{":dirs"}, nil},
		{[]string{"apply", ""}, []string{":files"}, nil},
		{[]string{"run", "--", ""}, []string{":commands"}, nil},
		{[]string{"run", "--", "make", ""}, []string{":files"}, nil},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}, nil},
		{[]string{"help", "branch", "sw"}, []string{"switch\t"}, nil},
		{[]string{"bogus", ""}, nil, []string{"mount\t"}},
	} {
		var out strings.Builder
		if code := runComplete(tc.words, &out); code != cli.ExitOK {
			t.Errorf("__complete %q: exit %d", tc.words, code)
		}
		lines := strings.Split(out.String(), "\n")
		has := func(w string) bool {
			for _, l := range lines {
				if strings.HasPrefix(l, w) {
					return true
				}
			}
			return false
		}
		for _, w := range tc.want {
			if !has(w) {
				t.Errorf("__complete %q: no line %q in:\n%s", tc.words, w, out.String())
			}
		}
		for _, w := range tc.not {
			if has(w) {
				t.Errorf("__complete %q: line %q should not be there:\n%s", tc.words, w, out.String())
			}
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{"bash": "complete -F _agentfs agentfs", "zsh": "#compdef agentfs", "fish": "complete -c agentfs"} {
		code, out, errOut := runArgs("completion", shell)
		if code != cli.ExitOK || !strings.Contains(out, marker) || !strings.Contains(out, "__complete") {
			t.Errorf("agentfs completion %s: exit %d, stderr %q; want a script with %q calling __complete", shell, code, errOut, marker)
		}
	}
	if code, _, errOut := runArgs("completion", "tcsh"); code != cli.ExitUsage || !strings.Contains(errOut, "bash, zsh or fish") {
		t.Errorf("agentfs completion tcsh: exit %d, stderr %q; want a usage error naming the shells", code, errOut)
	}
}
