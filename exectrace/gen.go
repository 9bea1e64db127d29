package exectrace

// The BPF program is compiled ahead of time: exectrace_bpfel.go and
// exectrace_bpfel.o are generated from bpf/exectrace.bpf.c and
// committed, so that building agentfs needs no C compiler. `make generate`
// regenerates them (it needs clang, bpftool and libbpf's headers: the
// Debian packages clang, bpftool and libbpf-dev), writing bpf/vmlinux.h
// from the running kernel's BTF first (CO-RE relocations make the
// object run on other kernels).
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type exec_header -type exit_event exectrace bpf/exectrace.bpf.c
