package remote

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRegistry adds, finds, lists and removes remotes in a remotes file
// of the test's own, and refuses what cannot be one.
func TestRegistry(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	if _, err := Find(""); err == nil || !strings.Contains(err.Error(), "agentfs remote add") {
		t.Errorf("Find with no remote = %v, want an error saying how to add one", err)
	}
	team := Config{Name: "team", URL: "s3://agent-runs/acme/", Endpoint: "http://127.0.0.1:7070"}
	if err := Add(team); err != nil {
		t.Fatal(err)
	}
	got, err := Find("")
	if err != nil || got.Name != "team" || got.URL != "s3://agent-runs/acme" || got.Endpoint != team.Endpoint {
		t.Errorf("Find(\"\") = %+v, %v; want team at s3://agent-runs/acme", got, err)
	}
	if err := Add(Config{Name: "aws", URL: "s3://other-bucket", Profile: "ci"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(""); err == nil || !strings.Contains(err.Error(), "--remote") {
		t.Errorf("Find(\"\") of two remotes = %v, want an error asking for --remote", err)
	}
	all, err := Remotes()
	if err != nil || len(all) != 2 || all[0].Name != "aws" || all[1].Name != "team" {
		t.Errorf("Remotes = %+v, %v; want aws and team", all, err)
	}
	for _, bad := range []Config{
		{Name: "team", URL: "s3://agent-runs/x"},
		{Name: "a/b", URL: "s3://agent-runs/x"},
		{Name: "-x", URL: "s3://agent-runs/x"},
		{Name: "ok", URL: "agent-runs/x"},
		{Name: "ok", URL: "s3://agent-runs/x", Endpoint: "127.0.0.1:7070"},
	} {
		if err := Add(bad); err == nil {
			t.Errorf("Add(%+v) succeeded", bad)
		}
	}
	if _, err := Remove("team"); err != nil {
		t.Fatal(err)
	}
	if _, err := Find("team"); !errors.Is(err, ErrNoRemote) {
		t.Errorf("Find of a removed remote = %v, want ErrNoRemote", err)
	}
	if _, err := Remove("team"); !errors.Is(err, ErrNoRemote) {
		t.Errorf("Remove of a removed remote = %v, want ErrNoRemote", err)
	}
	p, _ := RegistryFile()
	if want := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "agentfs", "remotes.json"); p != want {
		t.Errorf("RegistryFile = %s, want %s", p, want)
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("remotes file: %v", err)
	}
}
