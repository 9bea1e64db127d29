package overlay

import (
	"sync"

	"golang.org/x/sys/unix"
)

// # Inode numbers of lower files
//
// A lower file on the lower root's filesystem shows its own st_ino.
// Files of other filesystems mounted inside the lower tree (a separate
// /home under agentfs run --system, a bind mount in a project) would
// collide with it, and with each other: they show
//
//	1<<62 | slot<<48 | st_ino & (1<<48 - 1)
//
// where slot numbers the pair (st_dev, st_ino >> 48): two files show
// one number only if they are one inode. Numbers of the lower root's
// own filesystem at or above 1<<62 (an overlayfs with xino) go the same
// way. The store numbers the pairs for good (Config.DeviceSlot,
// branch.Store.DeviceSlot), so that a number copied up into an entry
// never comes back for another file after a remount, when the devices
// are met in another order; inodes made in the overlay are 1<<63|n
// (branch.Store.AllocIno). Past maxSlots pairs (16,384 filesystems, or
// inode numbers that use more than 48 bits over that many ranges),
// the slot is a hash of the pair and may collide; agentfs logs it once.

const (
	// inoMapped is where the numbers of mapped lower inodes start.
	inoMapped = 1 << 62
	slotShift = 48
	maxSlots  = 1 << (62 - slotShift)
)

// deviceSlots numbers the pairs of one view (see above).
type deviceSlots struct {
	of     func(dev, high uint64) (uint64, error) // Config.DeviceSlot, or nil
	mu     sync.Mutex
	mem    map[[2]uint64]uint64 // the slots known; without of, made here
	warned bool
}

// slot returns the slot of (dev, high), and false when it is a hash.
func (d *deviceSlots) slot(dev, high uint64) (uint64, bool) {
	key := [2]uint64{dev, high}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.mem[key]; ok {
		return s, true
	}
	if d.mem == nil {
		d.mem = map[[2]uint64]uint64{}
	}
	s := uint64(len(d.mem))
	if d.of != nil {
		var err error
		if s, err = d.of(dev, high); err != nil {
			return hashSlot(dev, high), false
		}
	}
	if s >= maxSlots {
		return hashSlot(dev, high), false
	}
	d.mem[key] = s
	return s, true
}

func hashSlot(dev, high uint64) uint64 {
	return ((dev ^ high*0xBF58476D1CE4E5B9) * 0x9E3779B97F4A7C15) >> (64 - (62 - slotShift))
}

// mapIno returns the st_ino shown for a lower inode (see above).
func (v *FS) mapIno(st *unix.Stat_t) uint64 {
	if st.Dev == v.lowerDev && st.Ino < inoMapped {
		return st.Ino
	}
	s, ok := v.slots.slot(st.Dev, st.Ino>>slotShift)
	if !ok {
		v.slots.mu.Lock()
		warn := !v.slots.warned
		v.slots.warned = true
		v.slots.mu.Unlock()
		if warn {
			v.log.Warn("too many filesystems (or inode ranges) under the lower directory: inode numbers of some may collide", "dev", st.Dev, "ino", st.Ino)
		}
	}
	return inoMapped | s<<slotShift | st.Ino&(1<<slotShift-1)
}
