package integration

import (
	"syscall"
	"time"
	"unsafe"
)

type unixStat = syscall.Stat_t

var time1 = time.Unix(1234567890, 0)

func unsafePointer(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }
