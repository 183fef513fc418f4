package evloop

import "golang.org/x/sys/unix"

// The 64-bit epoll_data union is Fd (low half) and Pad (high half) in
// golang.org/x/sys/unix's EpollEvent on linux/amd64 and arm64.

func setData(ev *unix.EpollEvent, d uint64) {
	ev.Fd = int32(uint32(d))
	ev.Pad = int32(uint32(d >> 32))
}

func getData(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}
