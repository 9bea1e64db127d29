// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// The exec trace of agentfs: every program a traced process starts, and
// how it ends, from three BTF tracepoints (tp_btf, which need no
// tracefs): sched_process_exec (a program started: its pid, parent,
// uid, argv and working directory), sched_process_fork (a traced
// process's child is traced) and sched_process_exit (the end of a
// traced process's main thread: its exit status). A process is traced
// when it runs in the session's cgroup (or one below it), when its
// working directory is on the mount (the device in settings), or when
// its parent was traced when it forked: the trace follows the process
// tree. Records go to a ring buffer, which
// the daemon reads; a traced program never waits for the reader (a full
// buffer drops the record and counts it).
//
// The Go side (exectrace.go) reads struct exec_event and exit_event as
// laid out here: keep the two in step.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define ARGV_MAX 4096 // bytes of argv kept (a power of two)
#define CWD_MAX 4096  // bytes of the working directory kept (a power of two)
#define NAME_MAX_ 256 // bytes of one path component copied
#define DEPTH 256     // path components and mount points walked
#define DATA_MASK (ARGV_MAX + CWD_MAX - 1)

enum { KIND_EXEC = 1, KIND_EXIT = 2 };

// An exec record is its header and then argv_len bytes of arguments
// (NUL-separated) and cwd_len bytes of the working directory's
// components, leaf first, each ending in a NUL (the reader reverses
// them): only what the process has, so that the ring buffer holds many.
struct exec_header {
	u32 kind;
	u32 pid;
	u32 ppid;
	u32 uid;
	u64 time_ns; // CLOCK_BOOTTIME
	u32 argv_len;
	u32 cwd_len;
	u32 flags; // 1: argv cut at ARGV_MAX, 2: cwd cut
	u32 pad;
};

// exec_event is where a record is built (a per-CPU scratch area): the
// data of a record may start anywhere below ARGV_MAX + CWD_MAX and take
// up to NAME_MAX_ more bytes.
struct exec_event {
	struct exec_header h;
	char data[ARGV_MAX + CWD_MAX + NAME_MAX_];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct exec_event);
} scratch SEC(".maps");

struct exit_event {
	u32 kind;
	u32 pid;
	u64 time_ns;
	u64 start_ns; // when its (last) exec was recorded
	u32 status; // as wait(2) gives it: exit code << 8, or the signal
	u32 pad;
};

// For bpf2go to emit the Go types of the records.
const struct exec_header *unused_exec_header __attribute__((unused));
const struct exit_event *unused_exit_event __attribute__((unused));

// settings[0]: what to trace.
struct trace_config {
	u32 use_cgroup; // trace processes in the cgroup of cgroups[0]
	u32 dev;        // trace processes whose working directory is on this device (kernel encoding), 0: none
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct trace_config);
} settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} cgroups SEC(".maps");

// traced holds the processes traced, by pid (thread group id): the
// time their program started, or 0 for a process forked by a traced
// one that has not started a program of its own yet (a subshell: what
// it starts is traced, its own exit is not recorded).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u64);
} traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

// dropped[0] counts the records the ring buffer had no room for.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} dropped SEC(".maps");

static __always_inline void count_drop(void)
{
	u32 zero = 0;
	u64 *n = bpf_map_lookup_elem(&dropped, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

// wanted reports whether the current process (task) is to be traced.
static __always_inline int wanted(struct task_struct *task, u32 pid, u32 ppid)
{
	u32 zero = 0;
	struct trace_config *cfg = bpf_map_lookup_elem(&settings, &zero);
	if (!cfg)
		return 0;
	if (cfg->use_cgroup && bpf_current_task_under_cgroup(&cgroups, 0) == 1)
		return 1;
	// Itself (forked by a traced process, or traced before this
	// program), or its parent: a process whose parent has exited (a
	// daemon, setsid -f) is still traced.
	if (bpf_map_lookup_elem(&traced, &pid) || bpf_map_lookup_elem(&traced, &ppid))
		return 1;
	if (cfg->dev) {
		struct super_block *sb = BPF_CORE_READ(task, fs, pwd.dentry, d_sb);
		if (sb && BPF_CORE_READ(sb, s_dev) == cfg->dev)
			return 1;
	}
	return 0;
}

// walk is the state of walk_cwd's loop.
struct walk {
	struct dentry *d;
	struct vfsmount *vm;
	struct mount *mnt;
	struct exec_event *e;
	u32 base; // where the directory's bytes start in e->data
	u32 off;  // bytes written
	u32 done; // the walk reached the root
};

// walk_step takes one step up from w->d: it writes the name of a
// component, or crosses a mount point. 1 ends the loop.
static long walk_step(u64 i, void *arg)
{
	struct walk *w = arg;
	// Plain locals: BPF_CORE_READ of w->x would relocate struct walk
	// too, which the kernel does not have.
	struct dentry *d = w->d;
	struct vfsmount *vm = w->vm;
	struct mount *mnt = w->mnt;
	struct dentry *root = BPF_CORE_READ(vm, mnt_root);
	struct dentry *parent = BPF_CORE_READ(d, d_parent);
	if (d == root || d == parent) {
		struct mount *up = BPF_CORE_READ(mnt, mnt_parent);
		if (up == mnt || !up) {
			w->done = 1; // the root of it all
			return 1;
		}
		w->d = BPF_CORE_READ(mnt, mnt_mountpoint);
		w->mnt = up;
		w->vm = &up->mnt;
		return 0;
	}
	struct exec_event *e = w->e;
	if (w->off >= CWD_MAX) {
		e->h.flags |= 2;
		return 1;
	}
	const unsigned char *name = BPF_CORE_READ(d, d_name.name);
	long n = bpf_probe_read_kernel_str(&e->data[(w->base + w->off) & DATA_MASK], NAME_MAX_, name);
	if (n <= 0)
		return 1;
	w->off += n;
	w->d = parent;
	return 0;
}

// walk_cwd writes the components of task's working directory, leaf
// first, into e->data after the arguments, crossing mount points, and
// sets e->h.cwd_len. The loop is bpf_loop's (kernel 5.17): the verifier
// checks its body once, where an unrolled walk costs it most of a
// second at every load.
static __always_inline void walk_cwd(struct task_struct *task, struct exec_event *e)
{
	struct walk w = {
		.d = BPF_CORE_READ(task, fs, pwd.dentry),
		.vm = BPF_CORE_READ(task, fs, pwd.mnt),
		.e = e,
		.base = e->h.argv_len > ARGV_MAX ? ARGV_MAX : e->h.argv_len,
	};
	w.mnt = container_of(w.vm, struct mount, mnt);
	bpf_loop(DEPTH, walk_step, &w, 0);
	if (!w.done)
		e->h.flags |= 2; // cut: too deep, too long, or unreadable
	e->h.cwd_len = w.off < CWD_MAX ? w.off : CWD_MAX;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(handle_exec, struct task_struct *task)
{
	u32 pid = bpf_get_current_pid_tgid() >> 32;
	u32 ppid = BPF_CORE_READ(task, real_parent, tgid);
	if (!wanted(task, pid, ppid))
		return 0;
	u64 now = bpf_ktime_get_boot_ns();
	bpf_map_update_elem(&traced, &pid, &now, BPF_ANY);

	u32 zero = 0;
	struct exec_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	e->h.kind = KIND_EXEC;
	e->h.pid = pid;
	e->h.ppid = ppid;
	e->h.uid = (u32)bpf_get_current_uid_gid();
	e->h.time_ns = now;
	e->h.flags = 0;
	e->h.pad = 0;

	unsigned long start = BPF_CORE_READ(task, mm, arg_start);
	unsigned long end = BPF_CORE_READ(task, mm, arg_end);
	unsigned long len = end - start;
	if (len > ARGV_MAX) {
		len = ARGV_MAX;
		e->h.flags |= 1;
	}
	e->h.argv_len = 0;
	if (len > 0 && bpf_probe_read_user(e->data, len & (ARGV_MAX - 1) ? len & (ARGV_MAX - 1) : ARGV_MAX, (void *)start) == 0)
		e->h.argv_len = len;
	walk_cwd(task, e);
	u64 size = sizeof(e->h) + e->h.argv_len + e->h.cwd_len;
	if (size > sizeof(*e))
		size = sizeof(*e);
	if (bpf_ringbuf_output(&events, e, size, 0) != 0)
		count_drop();
	return 0;
}

// A traced process's fork is traced too, before it runs: a subshell
// that cds elsewhere and starts a program is still followed. Threads
// are not processes: they are left out.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
	u32 ppid = BPF_CORE_READ(parent, tgid);
	u32 pid = BPF_CORE_READ(child, pid);
	if (pid != BPF_CORE_READ(child, tgid))
		return 0; // a thread
	if (!bpf_map_lookup_elem(&traced, &ppid))
		return 0;
	u64 zero = 0;
	bpf_map_update_elem(&traced, &pid, &zero, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(handle_exit, struct task_struct *task)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 pid = id >> 32;
	if ((u32)id != pid)
		return 0; // a thread other than the main one
	u64 *startp = bpf_map_lookup_elem(&traced, &pid);
	if (!startp)
		return 0;
	u64 start = *startp;
	bpf_map_delete_elem(&traced, &pid);
	if (start == 0)
		return 0; // forked, never started a program: nothing to end
	struct exit_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop();
		return 0;
	}
	e->kind = KIND_EXIT;
	e->pid = pid;
	e->time_ns = bpf_ktime_get_boot_ns();
	e->start_ns = start;
	e->status = BPF_CORE_READ(task, exit_code);
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}
