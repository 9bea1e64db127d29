package fs

import (
	"log/slog"

	"github.com/agentfs/agentfs/ctl"
	"github.com/agentfs/agentfs/overlay"
)

// Options configure a mount.
type Options struct {
	Mountpoint string
	// View is the overlay every process sees (branch main).
	View *overlay.FS
	// Control serves ioctls on the control file; nil disables it.
	Control ctl.Handler
	// Passthrough asks for FUSE passthrough; it is used only when the
	// kernel grants it (root, kernel >= 6.9).
	Passthrough bool
	// WritebackCache asks the kernel to hold writes in its page cache
	// and send them later, in large WRITEs (at close, fsync, or when
	// its writeback runs): for mounts without passthrough, where every
	// write(2) would otherwise be a request. The kernel does not grant
	// passthrough to a mount with a writeback cache, so ask for one or
	// the other. See "Writeback cache" in doc.go for what it changes.
	WritebackCache bool
	// WriteBackAll, where set, is what a control request that reads the
	// files (a snapshot, a diff, an export, an apply) runs first instead
	// of the server's own WriteBack: the daemon's, which writes back
	// every mount it serves, since the writes a branch mount holds are
	// as much the request's as this mount's (agentfs exec -b mounts a
	// branch of its own, and export or apply of that branch may come
	// through this mount).
	WriteBackAll func()
	// IOURing asks for FUSE over io_uring (fuseuring): requests are
	// answered on the CPU that made them. It is used only when the
	// kernel offers it (Linux >= 6.14 with the fuse module's
	// enable_uring on); otherwise requests come over /dev/fuse.
	IOURing bool
	// AbortConnection aborts the mount's FUSE connection (fusectl). It
	// is called, without stat'ing the mountpoint, in the one case where
	// the kernel would otherwise hold every request: it granted io_uring
	// and no queue can start, nor tell it to give up.
	AbortConnection func()
	// AllowOther lets other users in (allow_other + default_permissions);
	// set it when running as root.
	AllowOther bool
	// FsName is shown as the source in /proc/mounts (e.g. the lower dir).
	FsName string
	Debug  bool
	Logger *slog.Logger

	// Activity, when set, receives an event for every successful
	// mutating operation (see "Activity" in activity.go); with
	// ActivityReads also for lookups, opens for reading and listings.
	Activity      Activity
	ActivityReads bool
}
