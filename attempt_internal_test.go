package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/ask"
	"github.com/dlock-go/dlock/internal/transport"
)

// These drive the attempt's decisions from made-up answers, without Redis.

var (
	granted    = func(fence int64) answer[grant] { return answer[grant]{V: grant{ok: true, fence: fence}} }
	taken      = func(pttl time.Duration) answer[grant] { return answer[grant]{V: grant{pttl: pttl}} }
	failed     = answer[grant]{Err: &NodeError{Node: "n", Op: "acquire", Err: errors.New("connection reset")}}
	refusedErr = answer[grant]{Err: &NodeError{Node: "n", Op: "acquire", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}}
	abandoned  = answer[grant]{Err: &NodeError{Node: "n", Op: "acquire", Err: ask.ErrNodeTimeout}, Abandoned: true}
)

const testTTL = 10 * time.Second

func TestJudgeAMajorityOfGrantsInTimeIsTheLockWithTheirHighestFence(t *testing.T) {
	out := judge([]answer[grant]{granted(7), abandoned, granted(9)}, nil, time.Millisecond, testTTL)
	if out.err != nil || out.fence != 9 || out.giveBack != nil {
		t.Fatalf("outcome %+v, want obtained with fence 9 and nothing to give back", out)
	}
}

func TestJudgeASingleNodeIsAQuorumOfOne(t *testing.T) {
	if out := judge([]answer[grant]{granted(3)}, nil, 0, testTTL); out.err != nil || out.fence != 3 {
		t.Fatalf("granted: %+v", out)
	}
	out := judge([]answer[grant]{taken(time.Second)}, nil, 0, testTTL)
	if !errors.Is(out.err, ErrNotObtained) || out.holderTTL != time.Second || out.giveBack != nil {
		t.Fatalf("taken: %+v", out)
	}
	out = judge([]answer[grant]{failed}, nil, 0, testTTL)
	if !errors.Is(out.err, failed.Err) || errors.Is(out.err, ErrNoQuorum) || !slices.Equal(out.uncertain, []int{0}) {
		t.Fatalf("failed: %+v, want the node's own error and a background give-back", out)
	}
}

func TestJudgeGrantsThatCameTooLateAreGivenBack(t *testing.T) {
	out := judge([]answer[grant]{granted(1), granted(2), taken(-1)}, nil, testTTL, testTTL)
	if !errors.Is(out.err, ErrLeaseExpired) || !slices.Equal(out.giveBack, []int{0, 1}) {
		t.Fatalf("outcome %+v, want ErrLeaseExpired and both grants given back", out)
	}
}

func TestJudgeAnEndedContextWinsOverTheGrants(t *testing.T) {
	out := judge([]answer[grant]{granted(1)}, context.Canceled, 0, testTTL)
	if !errors.Is(out.err, ErrNotObtained) || !errors.Is(out.err, context.Canceled) || !slices.Equal(out.giveBack, []int{0}) {
		t.Fatalf("outcome %+v, want not obtained, canceled, grant given back", out)
	}
}

func TestJudgeASplitIsTakenAndGivesBackItsMinority(t *testing.T) {
	out := judge([]answer[grant]{granted(1), taken(300 * time.Millisecond), taken(200 * time.Millisecond)}, nil, 0, testTTL)
	if !errors.Is(out.err, ErrNotObtained) || !errors.Is(out.err, errSplit) {
		t.Fatalf("err %v, want a split", out.err)
	}
	if out.holderTTL != 200*time.Millisecond || !slices.Equal(out.giveBack, []int{0}) {
		t.Fatalf("outcome %+v, want the shortest holder TTL and node 0 given back", out)
	}
}

func TestJudgeTooManyFailuresIsAQuorumErrorAndGivesBackWhatMaySitThere(t *testing.T) {
	out := judge([]answer[grant]{granted(1), failed, refusedErr, abandoned, taken(-1)}, nil, 0, testTTL)
	var qe *QuorumError
	if !errors.As(out.err, &qe) || qe.OK != 1 || len(qe.Errs) != 3 {
		t.Fatalf("err %v, want a QuorumError with 1 grant and 3 failures", out.err)
	}
	// The grant and the reset connection may hold our token; the refused
	// dial never left, and the abandoned node is late's.
	if !slices.Equal(out.giveBack, []int{0}) || !slices.Equal(out.uncertain, []int{1}) {
		t.Fatalf("give back %v now and %v in the background, want [0] and [1]", out.giveBack, out.uncertain)
	}
}

func TestLateGrantJoinsALockNothingWasAskedOf(t *testing.T) {
	if lateGiveBack(grant{ok: true}, nil, true) {
		t.Fatal("a late grant of a live lock with no renewal or release sent yet was given back")
	}
}

func TestLateGrantOfALockNotJoinableIsGivenBack(t *testing.T) {
	// Not joinable: the attempt failed, a renewal or release was sent,
	// or the lease is over.
	if !lateGiveBack(grant{ok: true}, nil, false) {
		t.Fatal("a late grant was kept for a lock it cannot join")
	}
}

func TestLateErrorsAreGivenBackUnlessNothingWasSent(t *testing.T) {
	if !lateGiveBack(grant{}, failed.Err, true) {
		t.Fatal("a late error, which may hide a grant, was not given back")
	}
	if lateGiveBack(grant{}, refusedErr.Err, true) {
		t.Fatal("a refused connection, which sent nothing, was given back")
	}
	if lateGiveBack(grant{pttl: time.Second}, nil, false) {
		t.Fatal("a late \"taken\" was given back")
	}
}

// An acquire not sent because the node had not answered the Client's own
// release within the node timeout (quorum.Flights) is a slow node, as a node
// timeout is, not a node down: Lock waits for such nodes rather than give
// up (found by review: with two of three nodes stalled, 4 of 20 Locks
// returned a QuorumError after 50 ms where they had waited before).
func TestAnAcquireNotSentForTheClientsOwnReleaseIsASlowNode(t *testing.T) {
	n := &node{Node: &transport.Node{Name: "n"}}
	unsent := n.fail("acquire", errUnsent)
	if !isSlow(unsent) || !neverSent(unsent) {
		t.Fatalf("isSlow %v, neverSent %v; want both", isSlow(unsent), neverSent(unsent))
	}
	c := &Client{nodes: make([]*node, 3)}
	qe := &QuorumError{OK: 1, Nodes: 3, Quorum: 2, Errs: []error{unsent, unsent}}
	if !c.mayWait(context.Background(), options{failFast: true}, qe) {
		t.Fatal("Lock gives up on two of three nodes whose release is still unanswered")
	}
}

// An attempt judged before its context ended, and not waited after because
// it has ended since, still says so (Lock's doc): its error matches
// ErrNotObtained and the context's error, and keeps a node error it had.
// Errors a wait does not outlast are returned as they are.
func TestAnAttemptWhoseContextEndedAfterItsVerdictSaysSo(t *testing.T) {
	c := &Client{nodes: make([]*node, 3)}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	var o options
	givenBack := fmt.Errorf("%w (%w: the grant is given back in the background)", &QuorumError{Nodes: 3, Quorum: 2, Errs: []error{abandoned.Err}}, context.Canceled)
	for _, err := range []error{errNotObtainedSplit, ErrNotObtained, refusedErr.Err, &QuorumError{Nodes: 3, Quorum: 2}, givenBack} {
		got := c.unwaited(ended, o, err)
		if !errors.Is(got, ErrNotObtained) || !errors.Is(got, context.Canceled) {
			t.Errorf("%v, then the context ended: %v, want ErrNotObtained and Canceled", err, got)
		}
		if transient(err) && !errors.Is(got, err) {
			t.Errorf("%v, then the context ended: %v, want the node error kept", err, got)
		}
		if got := c.unwaited(context.Background(), o, err); got != err {
			t.Errorf("%v with a live context became %v", err, got)
		}
	}
	noperm := &NodeError{Node: "n", Op: "acquire", Err: errors.New("NOPERM this user has no permissions to run the 'evalsha' command")}
	for _, err := range []error{ErrWrongKind, &QuorumError{Nodes: 3, Quorum: 2, Errs: []error{noperm, noperm, noperm}}} {
		if got := c.unwaited(ended, o, err); got != err {
			t.Errorf("%v after the context ended became %v", err, got)
		}
	}
}
