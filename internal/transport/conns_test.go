package transport

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
)

// The own client's connections are tracked while open, keep go-redis's
// health check (syscall.Conn) where the connection has it, and closeAll
// ends them and refuses new ones.
func TestConnsTrackAndCloseTheOwnClientsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	var cs conns
	dial := cs.dialer((&net.Dialer{}).DialContext)
	ctx := context.Background()
	a, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.(syscall.Conn); !ok {
		t.Error("a tracked TCP connection lost its syscall.Conn")
	}
	b, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if len(cs.open) != 1 {
		t.Fatalf("%d connections tracked, want 1 (one was closed)", len(cs.open))
	}
	cs.closeAll()
	if _, err := a.Write([]byte("PING\r\n")); err == nil {
		t.Error("closeAll left a connection open")
	}
	if _, err := dial(ctx, "tcp", ln.Addr().String()); !errors.Is(err, errOwnClosed) {
		t.Errorf("a dial after closeAll: %v, want errOwnClosed", err)
	}
	pipe, _ := net.Pipe()
	defer pipe.Close()
	var cs2 conns
	p, _ := cs2.dialer(func(context.Context, string, string) (net.Conn, error) { return pipe, nil })(ctx, "", "")
	if _, ok := p.(syscall.Conn); ok {
		t.Error("a connection without syscall.Conn gained one")
	}
}
