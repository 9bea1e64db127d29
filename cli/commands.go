package cli

// summaries are the one-line summaries of agentfs's top-level commands,
// for agentfs --help and the shell's completion. They are here, not
// with each command, so that the thin front, which links only the
// commands of this package, lists every command: Register takes a
// top-level command's summary from here, and refuses one that is not
// here (TestCommandTable in cmd/agentfs-core checks that every command
// here is registered there).
var summaries = map[string]string{
	"apply":      "write the mount's changes into the project",
	"branch":     "create, list, delete and switch branches",
	"completion": "print a shell completion script (bash, zsh or fish)",
	"diff":       "show what changed between the project, snapshots and branches",
	"discard":    "drop an agentfs run session's changes (delete its store)",
	"exec":       "run a command that sees a branch at the mount",
	"export":     "write a snapshot or a branch out as a plain directory",
	"fsck":       "check the store: entries, files, snapshots",
	"gc":         "free the space of files no branch, snapshot or open file uses",
	"log":        "show what programs did in the mount, or with --exec every command they ran",
	"mcp":        "serve the workspace's checkpoints, rewinds and branches to an agent over MCP (stdio)",
	"merge":      "merge a branch into this one, three-way (undoable)",
	"mount":      "mount a copy-on-write view of a project",
	"pull":       "take a session from a remote onto this machine",
	"push":       "send a session or snapshots to a remote",
	"record":     "write an ended session's record in the agent-snapshot bundle format",
	"remote":     "add, list and remove remotes (S3-compatible object storage)",
	"restore":    "bring the mount back to a snapshot (undoable)",
	"run":        "run a command on a private copy-on-write view of the project (--system: of the whole system), as a session",
	"sessions":   "list the agentfs run sessions (project or system) and what each changed",
	"snapshot":   "take, list and delete snapshots of the mount",
	"status":     "show a mount's lower, store, backstore, I/O mode and usage",
	"tag":        "name a snapshot, or delete a name",
	"tournament": "run several attempts side by side, each in its own branch, and pick a winner",
	"unmount":    "unmount a mount (its changes are discarded unless it has a --store)",
	"verify":     "check snapshots against their content hashes and roots",
	"version":    "print the version, and what the kernel offers agentfs",
}
