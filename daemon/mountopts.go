package daemon

import (
	"errors"
	"fmt"
	"strings"
)

// # Mount options
//
// mount(8) hands a filesystem's helper (mount.fuse.agentfs, and
// agentfs mount -o) one comma-separated list of options, from the
// command line or the fourth field of an /etc/fstab line. It holds
// three kinds:
//
//   - the kernel's mount flags that a FUSE mount honours: nosuid,
//     nodev, noexec and their opposites (mount adds nosuid,nodev,noexec
//     for a "user" line of fstab); they go to the mount itself;
//   - mount's own options, which say when and by whom to mount and are
//     no business of the filesystem (rw, defaults, noauto, user,
//     nofail, _netdev, x-systemd.*, ...): they are ignored, as fuse3's
//     mount.fuse ignores them;
//   - the filesystem's own: every agentfs mount flag, as NAME or
//     NAME=VALUE (store=DIR, backstore=ramdisk, auto-snapshot, ...),
//     which the caller checks against the flags.
//
// "ro" is refused: an agentfs mount is the writable side of a
// copy-on-write view.

// MountOptions are a parsed option list.
type MountOptions struct {
	// Kernel are the mount flags for the kernel, in order.
	Kernel []string
	// Own are the options for agentfs, in order.
	Own []MountOption
	// Ignored are mount(8)'s own options, left alone.
	Ignored []string
}

// MountOption is one option of agentfs's own: a flag's name (with '-'
// where the option may have '_') and its value.
type MountOption struct {
	Name     string
	Value    string
	HasValue bool
}

func (o MountOption) String() string {
	if o.HasValue {
		return o.Name + "=" + o.Value
	}
	return o.Name
}

// kernelMountFlags are the mount flags go-fuse passes to the kernel
// (and fusermount3 accepts).
var kernelMountFlags = map[string]bool{"nosuid": true, "suid": true, "nodev": true, "dev": true, "noexec": true, "exec": true}

// mountOwnOptions are mount(8)'s options, by name, that a FUSE helper
// does not act on (as mount.fuse's list of "ignored" options): when to
// mount, who may, the access-time policy the kernel keeps for FUSE by
// itself.
var mountOwnOptions = map[string]bool{
	"rw": true, "defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true, "users": true,
	"owner": true, "group": true, "nofail": true, "_netdev": true, "async": true, "sync": true,
	"atime": true, "noatime": true, "relatime": true, "norelatime": true, "strictatime": true, "nostrictatime": true,
	"diratime": true, "nodiratime": true, "lazytime": true, "nolazytime": true, "silent": true, "loud": true,
}

// ParseMountOptions parses a comma-separated list of mount options
// (several lists, as -o may be given more than once). A value may be
// put in double quotes to hold commas (store="/a,b"), as libmount
// allows.
func ParseMountOptions(lists ...string) (MountOptions, error) {
	var mo MountOptions
	for _, list := range lists {
		opts, err := splitOptions(list)
		if err != nil {
			return mo, err
		}
		for _, o := range opts {
			name, value, hasValue := strings.Cut(o, "=")
			value = strings.Trim(value, `"`)
			switch {
			case name == "":
				return mo, fmt.Errorf("mount option %q has no name: write NAME or NAME=VALUE", o)
			case name == "ro":
				return mo, errors.New(`mount option "ro": an agentfs mount is writable (its changes go to the store, never to the project); remove ro`)
			case kernelMountFlags[name] && !hasValue:
				mo.Kernel = append(mo.Kernel, name)
			case mountOwnOptions[name], strings.HasPrefix(name, "x-"), name == "comment", name == "user" && hasValue, name == "users" && hasValue:
				mo.Ignored = append(mo.Ignored, o)
			default:
				mo.Own = append(mo.Own, MountOption{Name: strings.ReplaceAll(name, "_", "-"), Value: value, HasValue: hasValue})
			}
		}
	}
	return mo, nil
}

// splitOptions splits a list at the commas outside double quotes; empty
// items (a,,b) are dropped.
func splitOptions(list string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range list {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case r == ',' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
			}
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	if quoted {
		return nil, fmt.Errorf("mount options %q: a double quote is not closed", list)
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}
