// Package powerfs is a loopback file system (FUSE, go-fuse) that can lose
// power. Every write reaches the backing directory at once, as it reaches a
// page cache, and powerfs keeps, per file, an undo log of what it changed
// since the file's last fsync: the bytes it overwrote and the size it had.
// PowerLoss unmounts, rolls every file back to its last fsync, and mounts
// again, as a machine that loses power loses its page cache: synced data
// survives, unsynced data goes. It is the chaos harness's power-failure
// fault, after LazyFS.
//
// What it models: file data and sizes. Namespace operations (create,
// rename, unlink, mkdir) are durable at once, so a file created and never
// synced survives empty rather than vanishing; a real file system may lose
// the entry too unless its directory was synced. Files are told apart by
// their backing inode, so a rename keeps a file's undo log.
package powerfs

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is one mounted power-loss file system.
type FS struct {
	backing, mount string

	mu     sync.Mutex
	server *fuse.Server
	files  map[uint64]*undo // by backing inode
}

// undo is one file's changes since its last fsync.
type undo struct {
	fd     int   // the backing file, opened for rolling back until it is synced
	synced int64 // its size at the last fsync
	old    []extent
}

// extent is bytes a change overwrote, at off.
type extent struct {
	off  int64
	data []byte
}

// Mount serves backing at mount (both directories must exist) until
// Unmount. It needs root (or CAP_SYS_ADMIN) and /dev/fuse.
func Mount(backing, mount string) (*FS, error) {
	p := &FS{backing: backing, mount: mount, files: map[uint64]*undo{}}
	if err := p.serve(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *FS) serve() error {
	root, err := fs.NewLoopbackRoot(p.backing)
	if err != nil {
		return fmt.Errorf("powerfs: loopback over %s: %w", p.backing, err)
	}
	wrapped := &node{LoopbackNode: root.(*fs.LoopbackNode), p: p}
	root.(*fs.LoopbackNode).RootData.RootNode = wrapped
	server, err := fs.Mount(p.mount, wrapped, &fs.Options{
		MountOptions: fuse.MountOptions{FsName: "powerfs", Name: "powerfs", DirectMount: true, MaxBackground: 64},
	})
	if err != nil {
		return fmt.Errorf("powerfs: mount %s at %s: %w", p.backing, p.mount, err)
	}
	p.server = server
	return nil
}

// Unmount stops serving; the backing directory keeps what was written,
// synced or not.
func (p *FS) Unmount() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.server == nil {
		return nil
	}
	// As root, without fusermount (Debian's fuse package need not be
	// installed): the server's loop ends once the kernel lets go.
	if err := syscall.Unmount(p.mount, 0); err != nil {
		return err
	}
	p.server.Wait()
	p.server = nil
	return nil
}

// Pending is how many files have writes that were not synced.
func (p *FS) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.files)
}

// PowerLoss drops every write not synced: it unmounts (every process using
// the mount must be gone), rolls each file back to its last fsync, and
// mounts again. It returns how many files it rolled back.
func (p *FS) PowerLoss() (int, error) {
	if err := p.Unmount(); err != nil {
		return 0, fmt.Errorf("powerfs: unmount %s (is a process still using it?): %w", p.mount, err)
	}
	p.mu.Lock()
	n := len(p.files)
	var errs []error
	for ino, u := range p.files {
		if err := u.rollback(); err != nil {
			errs = append(errs, fmt.Errorf("inode %d: %w", ino, err))
		}
		delete(p.files, ino)
	}
	p.mu.Unlock()
	if len(errs) > 0 {
		return n, fmt.Errorf("powerfs: roll back: %v", errs)
	}
	return n, p.serve()
}

// rollback restores what the file held at its last fsync, newest change
// undone first, and lets go of the file.
func (u *undo) rollback() error {
	defer syscall.Close(u.fd)
	for _, e := range slices.Backward(u.old) {
		if _, err := syscall.Pwrite(u.fd, e.data, e.off); err != nil {
			return err
		}
	}
	if err := syscall.Ftruncate(u.fd, u.synced); err != nil {
		return err
	}
	return syscall.Fsync(u.fd)
}

// change records that [off, off+n) of the backing file fd is about to
// change (n < 0: from off to the end, a truncation): what it overwrites
// below the synced size is saved first. The caller holds p.mu.
func (p *FS) change(fd int, off, n int64) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	u := p.files[st.Ino]
	if u == nil {
		// A writable descriptor of the same file, whatever fd's mode, to
		// roll it back with, also after a rename.
		dup, err := syscall.Open(fmt.Sprintf("/proc/self/fd/%d", fd), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fs.ToErrno(err)
		}
		u = &undo{fd: dup, synced: st.Size}
		p.files[st.Ino] = u
	}
	end := u.synced
	if n >= 0 {
		end = min(end, off+n)
	}
	if off >= end {
		return 0
	}
	old := make([]byte, end-off)
	got, err := syscall.Pread(u.fd, old, off)
	if err != nil {
		return fs.ToErrno(err)
	}
	u.old = append(u.old, extent{off: off, data: old[:got]})
	return 0
}

// changePath records a truncation to size of the file at path (one about
// to happen without an open handle).
func (p *FS) changePath(path string, size int64) syscall.Errno {
	fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.change(fd, size, -1)
}

// synced forgets fd's file's changes: they are durable now. The caller
// holds p.mu, across the fsync, so that no write slips between the two.
func (p *FS) synced(fd int) {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return
	}
	if u := p.files[st.Ino]; u != nil {
		syscall.Close(u.fd)
		delete(p.files, st.Ino)
	}
}

// node is a loopback node whose files record their changes.
type node struct {
	*fs.LoopbackNode
	p *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), p: n.p}
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		// Opening with O_TRUNC truncates before any handle exists.
		if errno := n.p.changePath(n.backingPath(), 0); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.p.wrap(fh), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.p.changePath(filepath.Join(n.backingPath(), name), 0); errno != 0 && errno != syscall.ENOENT {
			return nil, nil, 0, errno
		}
	}
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, n.p.wrap(fh), fuseFlags, 0
}

func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if pf, isFile := f.(*file); isFile {
		return pf.Setattr(ctx, in, out)
	}
	if size, ok := in.GetSize(); ok {
		if errno := n.p.changePath(n.backingPath(), int64(size)); errno != 0 {
			return errno
		}
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// CopyFileRange is refused, so that the kernel copies through Read and
// Write, which record their changes.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

// file is an open file that records its changes. It wraps, and does not
// embed, the loopback handle: embedding would pass on PassthroughFd, with
// which the kernel writes to the backing file directly, past powerfs.
type file struct {
	h  *fs.LoopbackFile
	fd int // h's descriptor, valid until Release
	p  *FS
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
	_ fs.FileGetlker   = (*file)(nil)
	_ fs.FileSetlker   = (*file)(nil)
	_ fs.FileSetlkwer  = (*file)(nil)
)

func (p *FS) wrap(fh fs.FileHandle) *file {
	h := fh.(*fs.LoopbackFile)
	fd, _ := h.PassthroughFd()
	return &file{h: h, fd: fd, p: p}
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.h.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if errno := f.p.change(f.fd, off, int64(len(data))); errno != 0 {
		return 0, errno
	}
	return f.h.Write(ctx, data, off)
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if errno := f.p.change(f.fd, int64(off), int64(size)); errno != 0 {
		return errno
	}
	return f.h.Allocate(ctx, off, size, mode)
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if errno := f.h.Fsync(ctx, flags); errno != 0 {
		return errno
	}
	f.p.synced(f.fd)
	return 0
}

func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.h.Flush(ctx) }
func (f *file) Release(ctx context.Context) syscall.Errno { return f.h.Release(ctx) }

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.h.Getattr(ctx, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		f.p.mu.Lock()
		errno := f.p.change(f.fd, int64(size), -1)
		f.p.mu.Unlock()
		if errno != 0 {
			return errno
		}
	}
	return f.h.Setattr(ctx, in, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.h.Lseek(ctx, off, whence)
}

func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return f.h.Getlk(ctx, owner, lk, flags, out)
}

func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.h.Setlk(ctx, owner, lk, flags)
}

func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return f.h.Setlkw(ctx, owner, lk, flags)
}
