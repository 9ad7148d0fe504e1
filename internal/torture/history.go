package torture

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// Event is one thing a client process did, as it reports it (one JSON
// object a line on its standard output). Times are wall-clock nanoseconds:
// every process runs on this machine, so they share the clock.
type Event struct {
	Kind   string `json:"k"`           // attempt, grant, release, lost, error, resurrected; a herd's served, unserved; the harness's killed
	Client int    `json:"c"`           // the client's ID
	Fence  int64  `json:"f,omitempty"` // grant, release, write: the grant's fence
	Sent   int64  `json:"s,omitempty"` // grant: when the acquire request was sent
	// Expiry is, for a grant, the earliest moment the server can let the
	// key expire: the end of the holder's lease estimate plus its drift
	// margin. A loss notice by then is in time.
	Expiry int64  `json:"e,omitempty"`
	At     int64  `json:"t"`           // when it happened (wall clock, ns)
	Detail string `json:"d,omitempty"` // error kind, loss cause, release result
}

// DlockEvent turns a client event into the dlock.Event a client's Observer
// would have seen, for metrics. Attempts have no counterpart.
func (e Event) DlockEvent() (dlock.Event, bool) {
	switch e.Kind {
	case "grant":
		return dlock.Event{Kind: dlock.EventAcquire, Key: "torture", Fence: e.Fence, Wait: time.Duration(e.At - e.Sent)}, true
	case "error":
		err := errors.New(e.Detail)
		if e.Detail == "not_obtained" {
			err = dlock.ErrNotObtained
		}
		return dlock.Event{Kind: dlock.EventAcquire, Key: "torture", Err: err}, true
	case "lost":
		return dlock.Event{Kind: dlock.EventLost, Key: "torture", Fence: e.Fence, Err: dlock.ErrLost}, true
	case "release":
		var err error
		switch e.Detail {
		case "ok":
		case "not_held":
			err = dlock.ErrNotHeld
		default:
			err = errors.New(e.Detail)
		}
		return dlock.Event{Kind: dlock.EventRelease, Key: "torture", Fence: e.Fence, Err: err}, true
	}
	return dlock.Event{}, false
}

// recorder writes events as JSON lines, safe for concurrent use.
type recorder struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func newRecorder(w io.Writer) *recorder { return &recorder{enc: json.NewEncoder(w)} }

func (r *recorder) emit(e Event) {
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(e)
}
