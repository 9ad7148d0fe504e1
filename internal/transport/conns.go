package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
)

// conns are the connections of dlock's own pipelining client (pipeline.go),
// kept so that closing it can end what they wait for. go-redis's Close
// waits up to 30 s for a pipeline batch in flight, and a batch can be
// stuck on a stalled server: reading a reply, or the HELLO of a connection
// it opens to send again. Closing the connections themselves ends those
// reads at once, and after closeAll a new one is closed as soon as it is
// dialed (go-redis may still dial, and logs the refusal).
type conns struct {
	mu     sync.Mutex
	closed bool
	open   map[net.Conn]struct{}
}

// errOwnClosed is what a dial of dlock's own client gets once it is closed.
var errOwnClosed = errors.New("dlock: the Client is closed")

// dialer wraps dial so that every connection it makes is tracked.
func (cs *conns) dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.closed {
			cn.Close()
			return nil, errOwnClosed
		}
		if cs.open == nil {
			cs.open = map[net.Conn]struct{}{}
		}
		cs.open[cn] = struct{}{}
		t := trackedConn{Conn: cn, cs: cs}
		if sc, ok := cn.(syscall.Conn); ok {
			// go-redis checks a pooled connection's health through
			// syscall.Conn; a connection without it (TLS) is not
			// checked, with the wrapper as without.
			return &trackedSyscallConn{t, sc}, nil
		}
		return &t, nil
	}
}

// closeAll closes every tracked connection, and refuses new ones.
func (cs *conns) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	for cn := range cs.open {
		cn.Close()
	}
	cs.open = nil
}

// trackedConn is a connection that leaves its set when closed.
type trackedConn struct {
	net.Conn
	cs *conns
}

func (t *trackedConn) Close() error {
	t.cs.mu.Lock()
	delete(t.cs.open, t.Conn)
	t.cs.mu.Unlock()
	return t.Conn.Close()
}

// trackedSyscallConn is a trackedConn over a connection that has a
// syscall.Conn (a plain TCP or Unix connection).
type trackedSyscallConn struct {
	trackedConn
	sc syscall.Conn
}

func (t *trackedSyscallConn) SyscallConn() (syscall.RawConn, error) { return t.sc.SyscallConn() }
