package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// # The user's remotes
//
// `agentfs remote add` records a remote in the user's remotes file,
// ${XDG_CONFIG_HOME:-~/.config}/agentfs/remotes.json, beside the
// user's configuration file: a JSON object {"remotes": [Config, ...]},
// replaced atomically (a temporary file renamed over it). Credentials
// are never written there: they stay where AWS tools keep them.

// RegistryFile returns the path of the user's remotes file.
func RegistryFile() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "agentfs", "remotes.json"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the remotes file: %w: set XDG_CONFIG_HOME or HOME", err)
	}
	return filepath.Join(home, ".config", "agentfs", "remotes.json"), nil
}

// registry is the remotes file's content.
type registry struct {
	Remotes []Config `json:"remotes"`
}

// Remotes returns the user's remotes, sorted by name.
func Remotes() ([]Config, error) {
	p, err := RegistryFile()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r registry
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %v: fix or remove it", p, err)
	}
	slices.SortFunc(r.Remotes, func(a, b Config) int { return strings.Compare(a.Name, b.Name) })
	return r.Remotes, nil
}

// ErrNoRemote is the error of a remote name the user has not added.
var ErrNoRemote = errors.New("no remote of that name")

// Find returns the remote named name; with name "", the only remote
// there is.
func Find(name string) (Config, error) {
	all, err := Remotes()
	if err != nil {
		return Config{}, err
	}
	if name == "" {
		switch len(all) {
		case 0:
			return Config{}, fmt.Errorf("no remote is set up: add one (agentfs remote add NAME s3://BUCKET/PREFIX --endpoint URL)")
		case 1:
			return all[0], nil
		}
		return Config{}, fmt.Errorf("there are %d remotes: name one with --remote (agentfs remote ls lists them)", len(all))
	}
	for _, c := range all {
		if c.Name == name {
			return c, nil
		}
	}
	return Config{}, fmt.Errorf("remote %q: %w: agentfs remote ls lists them, agentfs remote add %s s3://BUCKET/PREFIX adds it", name, ErrNoRemote, name)
}

// CheckName refuses a remote name that cannot be one: 1 to 100
// letters, digits, '.', '_' and '-', not starting with '.' or '-'.
func CheckName(name string) error {
	ok := name != "" && len(name) <= 100 && name[0] != '.' && name[0] != '-'
	if strings.ContainsFunc(name, func(r rune) bool { return !nameRune(r) }) {
		ok = false
	}
	if !ok {
		return fmt.Errorf("%q cannot name a remote: use 1 to 100 letters, digits, '.', '_' and '-', not starting with '.' or '-'", name)
	}
	return nil
}

// nameRune reports whether r may be in a remote's name.
func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// Add records cfg as a remote of the user's, refusing a name taken,
// a bad name, URL or endpoint.
func Add(cfg Config) error {
	if err := CheckName(cfg.Name); err != nil {
		return err
	}
	loc, err := ParseURL(cfg.URL)
	if err != nil {
		return err
	}
	cfg.URL = loc.String()
	if cfg.Endpoint != "" {
		if _, _, _, err := endpointOf(cfg); err != nil {
			return err
		}
	}
	all, err := Remotes()
	if err != nil {
		return err
	}
	for _, c := range all {
		if c.Name == cfg.Name {
			return fmt.Errorf("a remote named %q exists already (%s): remove it first (agentfs remote rm %s) or choose another name", cfg.Name, c.URL, cfg.Name)
		}
	}
	return save(append(all, cfg))
}

// Remove forgets the remote named name (what it holds stays in the
// bucket).
func Remove(name string) (Config, error) {
	c, err := Find(name)
	if err != nil {
		return Config{}, err
	}
	all, err := Remotes()
	if err != nil {
		return Config{}, err
	}
	all = slices.DeleteFunc(all, func(x Config) bool { return x.Name == name })
	return c, save(all)
}

// save replaces the remotes file with all.
func save(all []Config) error {
	p, err := RegistryFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	if all == nil {
		all = []Config{}
	}
	b, err := json.MarshalIndent(registry{Remotes: all}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".remotes-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}
