package testenv

import "testing"

// TestMustRun: without the switch nothing fails; with it, a skip fails
// unless its test (or a parent) and condition are listed.
func TestMustRun(t *testing.T) {
	list := []expectedSkip{{test: "TestA/sub", cond: UserXattrs, why: "no xattrs on CI"}}
	for _, c := range []struct {
		required bool
		name     string
		cond     Condition
		fail     bool
		why      string
	}{
		{false, "TestB", Root, false, ""},
		{false, "TestA/sub", UserXattrs, false, ""},
		{true, "TestB", Root, true, ""},
		{true, "TestA/sub", UserXattrs, false, "no xattrs on CI"},
		{true, "TestA/sub/deeper", UserXattrs, false, "no xattrs on CI"},
		{true, "TestA/subway", UserXattrs, true, ""},
		{true, "TestA", UserXattrs, true, ""},
		{true, "TestA/sub", Root, true, ""},
	} {
		fail, why := mustRun(list, c.required, c.name, c.cond)
		if fail != c.fail || why != c.why {
			t.Errorf("mustRun(required %v, %s, %s) = %v, %q; want %v, %q", c.required, c.name, c.cond, fail, why, c.fail, c.why)
		}
	}
}

// TestSeeds: fixed seeds first, then the replayed and fresh ones the
// variable asks for.
func TestSeeds(t *testing.T) {
	const env = "AGENTFS_TESTENV_TEST_SEEDS"
	t.Setenv(env, "")
	if got := Seeds(t, 3, env); len(got) != 3 || got[0] != 0 || got[2] != 2 {
		t.Errorf("Seeds(3) without %s = %v, want [0 1 2]", env, got)
	}
	t.Setenv(env, "77, fresh:2")
	got := Seeds(t, 2, env)
	if len(got) != 5 || got[2] != 77 || got[3] == got[4] || got[3] < 2 {
		t.Errorf("Seeds(2) with %s=%q = %v, want 0, 1, 77 and two fresh seeds", env, "77, fresh:2", got)
	}
	t.Setenv(env, "123")
	if got := Seed(t, env); got != 123 {
		t.Errorf("Seed with %s=123 = %d", env, got)
	}
}
