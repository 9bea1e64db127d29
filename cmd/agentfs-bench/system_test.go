package main

import (
	"strings"
	"testing"
)

func TestSplitSystemOps(t *testing.T) {
	for _, tc := range []struct {
		only, rest string
		ops        []string
	}{
		{"", "", sysOpNames()},
		{"system", "", sysOpNames()},
		{"find,exec-bash", "find", []string{"exec-bash"}},
		{"go-build, system ,grep", "grep", sysOpNames()},
		{"find", "find", nil},
	} {
		ops, rest := splitSystemOps(tc.only)
		var names []string
		for _, op := range ops {
			names = append(names, op.name)
		}
		if strings.Join(names, ",") != strings.Join(tc.ops, ",") || rest != tc.rest {
			t.Errorf("splitSystemOps(%q) = %v, %q; want %v, %q", tc.only, names, rest, tc.ops, tc.rest)
		}
	}
}

func TestSystemTable(t *testing.T) {
	r := &report{System: []*sysResult{{Name: "exec-bash", Title: "bash -c true ×5",
		Runs:      map[string][]float64{sysNative: {1, 3, 2}, sysSession: {2, 2, 4}, sysUntraced: {3}},
		FirstRuns: map[string][]float64{sysNative: {2}, sysSession: {5}}}}}
	r.finishSystem()
	s := r.System[0]
	if s.Medians[sysSession] != 2 || s.Ratios[sysSession] != 1 || s.Ratios[sysUntraced] != 1.5 || s.FirstRatios[sysSession] != 2.5 {
		t.Fatalf("medians %v, ratios %v, first ratios %v", s.Medians, s.Ratios, s.FirstRatios)
	}
	var b strings.Builder
	r.systemMarkdown(&b)
	if want := "| bash -c true ×5 | 2.000 s | 2.000 s | 1.00× | 3.000 s | 1.50× | 5.000 s | 2.50× |"; !strings.Contains(b.String(), want) {
		t.Errorf("the table has no row %q:\n%s", want, b.String())
	}
}
