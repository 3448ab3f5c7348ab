// etcd-replay-apply applies a point-in-time replay's revisions straight into a restored
// etcd backend (its member/snap/db), with etcd's own storage code (mvcc, lessor), while no
// etcd serves it. Each revision is one write transaction: the store's revision after it
// must be the revision the frame names, or nothing more is applied and the exit code is 3.
//
//	etcd-replay-apply DB
//
// stdout, one JSON line once the backend is open: {"revision":N,"leases":[[id,ttl],...]};
// then frames on stdin (little-endian), until it closes:
//
//	'G' id:int64 ttl:int64                                  grant a lease under its recorded ID
//	'R' revision:int64 count:uint32, then count changes:    one revision
//	    0 keyLen:uint32 key valueLen:uint32 value lease:int64   a put
//	    1 keyLen:uint32 key                                     a delete
//
// and one JSON line at the end: {"revision":N,"applied":A}. Exit codes: 2 bad input or
// backend, 3 a revision landed on another number, 4 a lease unknown or granted twice.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/coreos/go-semver/semver"
	"go.uber.org/zap"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
)

const (
	exitInput    = 2
	exitMismatch = 3
	exitLease    = 4
	maxField     = 1 << 30 // no key or value of etcd comes near it; a larger length is a broken stream
)

type refusal struct {
	code    int
	message string
}

func (r refusal) Error() string { return r.message }

func refuse(code int, format string, args ...any) error {
	return refusal{code, fmt.Sprintf(format, args...)}
}

// fixedVersion answers the lessor's question about the cluster's version; nothing here
// checkpoints leases, so it only has to be a version the lessor knows.
type fixedVersion struct{}

func (fixedVersion) Version() *semver.Version { return semver.New("3.6.0") }

type frames struct {
	in  *bufio.Reader
	buf []byte
}

func (f *frames) bytes(n uint32) ([]byte, error) {
	if n > maxField {
		return nil, refuse(exitInput, "a field of %d bytes", n)
	}
	if uint32(cap(f.buf)) < n {
		f.buf = make([]byte, n)
	}
	b := f.buf[:n]
	if _, err := io.ReadFull(f.in, b); err != nil {
		return nil, refuse(exitInput, "the input ended inside a frame: %v", err)
	}
	return b, nil
}

func (f *frames) uint32() (uint32, error) {
	b, err := f.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (f *frames) int64() (int64, error) {
	b, err := f.bytes(8)
	if err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}

// field reads a length-prefixed byte string into memory of its own (the store keeps it).
func (f *frames) field() ([]byte, error) {
	n, err := f.uint32()
	if err != nil {
		return nil, err
	}
	b, err := f.bytes(n)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

type change struct {
	deleted bool
	key     []byte
	value   []byte
	lease   lease.LeaseID
}

type applier struct {
	store   mvcc.KV
	lessor  lease.Lessor
	applied int64
	changes []change
}

func (a *applier) grant(f *frames) error {
	id, err := f.int64()
	if err != nil {
		return err
	}
	ttl, err := f.int64()
	if err != nil {
		return err
	}
	if _, err := a.lessor.Grant(lease.LeaseID(id), ttl); err != nil {
		return refuse(exitLease, "lease %x (TTL %d): %v", id, ttl, err)
	}
	return nil
}

func (a *applier) revision(f *frames) error {
	revision, err := f.int64()
	if err != nil {
		return err
	}
	count, err := f.uint32()
	if err != nil {
		return err
	}
	a.changes = a.changes[:0]
	for i := uint32(0); i < count; i++ {
		kind, err := f.in.ReadByte()
		if err != nil {
			return refuse(exitInput, "the input ended inside revision %d", revision)
		}
		c := change{deleted: kind == 1}
		if kind > 1 {
			return refuse(exitInput, "revision %d: change kind %d", revision, kind)
		}
		if c.key, err = f.field(); err != nil {
			return err
		}
		if !c.deleted {
			if c.value, err = f.field(); err != nil {
				return err
			}
			id, err := f.int64()
			if err != nil {
				return err
			}
			c.lease = lease.LeaseID(id)
			if c.lease != lease.NoLease && a.lessor.Lookup(c.lease) == nil {
				return refuse(exitLease, "revision %d puts %q with lease %x, which the store does not hold", revision, c.key, id)
			}
		}
		a.changes = append(a.changes, c)
	}
	if before := a.store.Rev(); before != revision-1 {
		return refuse(exitMismatch, "revision %d would follow the store's revision %d", revision, before)
	}
	txn := a.store.Write(traceutil.TODO())
	for _, c := range a.changes {
		if c.deleted {
			txn.DeleteRange(c.key, nil)
		} else {
			txn.Put(c.key, c.value, c.lease)
		}
	}
	txn.End()
	if made := a.store.Rev(); made != revision {
		return refuse(exitMismatch, "revision %d of the source was applied as revision %d", revision, made)
	}
	a.applied++
	return nil
}

func (a *applier) run(in io.Reader) error {
	f := &frames{in: bufio.NewReaderSize(in, 1<<20)}
	for {
		kind, err := f.in.ReadByte()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return refuse(exitInput, "reading the input: %v", err)
		}
		switch kind {
		case 'G':
			err = a.grant(f)
		case 'R':
			err = a.revision(f)
		default:
			err = refuse(exitInput, "frame kind %q", kind)
		}
		if err != nil {
			return err
		}
	}
}

func report(v any) {
	line, _ := json.Marshal(v)
	fmt.Println(string(line))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: etcd-replay-apply DB")
		os.Exit(exitInput)
	}
	if _, err := os.Stat(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitInput)
	}
	lg := zap.NewNop()
	cfg := backend.DefaultBackendConfig(lg)
	cfg.Path = os.Args[1]
	cfg.UnsafeNoFsync = true // the scratch store lives as long as its pod; its snapshot is what is kept
	be := backend.New(cfg)
	lessor := lease.NewLessor(lg, be, fixedVersion{}, lease.LessorConfig{MinLeaseTTL: 1})
	store := mvcc.NewStore(lg, be, lessor, mvcc.StoreConfig{})
	held := [][2]int64{}
	for _, l := range lessor.Leases() {
		held = append(held, [2]int64{int64(l.ID), l.TTL()})
	}
	report(map[string]any{"revision": store.Rev(), "leases": held})

	a := &applier{store: store, lessor: lessor}
	err := a.run(os.Stdin)
	store.Commit()
	lessor.Stop()
	if closeErr := store.Close(); closeErr != nil && err == nil {
		err = refuse(exitInput, "closing the store: %v", closeErr)
	}
	be.ForceCommit()
	if closeErr := be.Close(); closeErr != nil && err == nil {
		err = refuse(exitInput, "closing the backend: %v", closeErr)
	}
	if err != nil {
		var r refusal
		if errors.As(err, &r) {
			fmt.Fprintln(os.Stderr, r.message)
			os.Exit(r.code)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitInput)
	}
	report(map[string]any{"revision": store.Rev(), "applied": a.applied})
}
