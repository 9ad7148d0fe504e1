package torture

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Resource is the fenced resource the clients write to: it accepts a write
// only if its fence is at least every fence it has accepted, and keeps the log
// of every write in the order it decided them.
type Resource struct {
	ln net.Listener

	mu      sync.Mutex
	highest int64
	log     []Write
	wg      sync.WaitGroup
	conns   map[net.Conn]struct{}
}

// Write is one write the resource decided.
type Write struct {
	Client   int   // the writer's ID
	Fence    int64 // the writer's fence
	Grant    int64 // the writer's grant time (wall clock, ns): which grant it wrote under
	Accepted bool  // whether the resource took it
	At       int64 // wall clock, ns
}

// NewResource listens on a loopback port. Clients send lines
// "W client fence grant_ns" and get "OK" or "STALE".
func NewResource() (*Resource, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Resource{ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is where clients connect.
func (r *Resource) Addr() string { return r.ln.Addr().String() }

// Log returns the writes decided so far, in order.
func (r *Resource) Log() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Write(nil), r.log...)
}

// Close stops the resource.
func (r *Resource) Close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Resource) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *Resource) serve(c net.Conn) {
	defer r.wg.Done()
	defer c.Close()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "W" {
			fmt.Fprintln(c, "ERR")
			continue
		}
		client, _ := strconv.Atoi(f[1])
		fence, _ := strconv.ParseInt(f[2], 10, 64)
		grant, _ := strconv.ParseInt(f[3], 10, 64)
		r.mu.Lock()
		ok := fence >= r.highest // the same holder may write again
		if ok {
			r.highest = fence
		}
		r.log = append(r.log, Write{Client: client, Fence: fence, Grant: grant, Accepted: ok, At: time.Now().UnixNano()})
		r.mu.Unlock()
		if ok {
			fmt.Fprintln(c, "OK")
		} else {
			fmt.Fprintln(c, "STALE")
		}
	}
}
