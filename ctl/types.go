package ctl

import "fmt"

// Op names a control operation. Numbers are part of the protocol: never
// reuse or renumber one; add new operations in their block.
//
//	1–15     protocol and daemon (fetch, ping, status, unmount)
//	16–31    snapshots (create, list, delete, ...)
//	32–47    branches (create, list, delete, bind, ...)
//	48–63    changes (diff, restore, apply, ...)
type Op uint16

// Operations.
const (
	// OpFetch continues a result too large for one buffer: the request
	// header carries the token and offset, the payload is empty.
	OpFetch Op = 1
	// OpPing answers "pong": the daemon is alive and speaks the protocol.
	OpPing Op = 2
	// OpStatus answers a Status.
	OpStatus Op = 3
	// OpUnmount makes the daemon unmount its mount and exit; it answers
	// an UnmountReply before it starts.
	OpUnmount Op = 4
)

var opNames = map[Op]string{
	OpFetch:   "fetch",
	OpPing:    "ping",
	OpStatus:  "status",
	OpUnmount: "unmount",
}

func (op Op) String() string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("op%d", uint16(op))
}

// Status is the reply of OpStatus.
type Status struct {
	Version    string `json:"version"` // the daemon's agentfs version
	Pid        int    `json:"pid"`     // the daemon's pid
	Owner      uint32 `json:"owner"`   // uid of the mount owner
	Lower      string `json:"lower"`
	Mountpoint string `json:"mountpoint"`
	Store      string `json:"store"`
	// Ephemeral stores are private directories deleted at unmount.
	Ephemeral bool `json:"ephemeral"`

	Backstore   string `json:"backstore"`      // hostfs | ramdisk
	BackingMode string `json:"backstore_mode"` // dir | tmpfs | shm
	BackingRoot string `json:"backstore_root"`
	SizeLimit   int64  `json:"ramdisk_size,omitempty"`
	Reflink     bool   `json:"reflink"` // copy-up and clones use FICLONE

	// Passthrough is whether the kernel does the I/O of upper files
	// directly on their backing files; IOMode says it in words.
	Passthrough bool   `json:"passthrough"`
	IOMode      string `json:"io_mode"`

	Objects int64 `json:"objects"`        // upper objects in the backstore
	Bytes   int64 `json:"bytes"`          // bytes they occupy
	FsFree  int64 `json:"backstore_free"` // free bytes where they live
}

// UnmountReply is the reply of OpUnmount.
type UnmountReply struct {
	// Pid is the daemon's pid: the client waits for it to exit.
	Pid int `json:"pid"`
}
