package ctl

// Operation names.
const (
	OpPing    = "ping"
	OpStatus  = "status"
	OpUnmount = "unmount"
)

// Status is the reply of OpStatus.
type Status struct {
	Version     string `json:"version"`
	Pid         int    `json:"pid"`
	Lower       string `json:"lower"`
	Mountpoint  string `json:"mountpoint"`
	Store       string `json:"store"`
	Ephemeral   bool   `json:"ephemeral"`
	Backstore   string `json:"backstore"`      // hostfs | ramdisk
	BackingMode string `json:"backstore_mode"` // dir | tmpfs | shm
	BackingRoot string `json:"backstore_root"`
	Reflink     bool   `json:"reflink"`
	Passthrough bool   `json:"passthrough"`
	IOMode      string `json:"io_mode"`
	Objects     int64  `json:"objects"`
	Bytes       int64  `json:"bytes"`
	FsFree      int64  `json:"backstore_free"`
	SizeLimit   int64  `json:"ramdisk_size,omitempty"`
}
