package wait

import "testing"

// A waiter on a key not contended lately tries the fast scripts first: a
// SLOW answer sends the full script, and so does a fast release that
// failed; a shared hold never tries them.
func TestTheFastScriptsFallBackToTheFullOnes(t *testing.T) {
	c := cfg()
	c.Fast = true
	w := New(c)
	if cs := w.Step(Event{Kind: Start, Now: at(0)}); len(cs) != 1 || cs[0].Kind != RunFastAcquire || len(cs[0].Args) != 3 {
		t.Fatalf("start: %+v", cs)
	}
	if cs := w.Step(Event{Kind: Reply, Now: at(1), Result: Result{Status: Slow}}); len(cs) != 1 || cs[0].Kind != RunAcquire || w.State() != Acquiring {
		t.Fatalf("slow: %+v", cs)
	}
	if cs := w.Step(Event{Kind: Reply, Now: at(2), Result: Result{Status: Granted, Fence: 4}}); len(cs) != 1 || cs[0].Kind != Grant || !cs[0].Lease.Equal(at(1001)) {
		t.Fatalf("grant: %+v", cs)
	}
	if cs := w.Step(Event{Kind: Unlock, Now: at(3)}); len(cs) != 1 || cs[0].Kind != RunFastRelease || len(cs[0].Args) != 1 {
		t.Fatalf("unlock: %+v", cs)
	}
	if cs := w.Step(Event{Kind: Failed, Now: at(4)}); len(cs) != 1 || cs[0].Kind != RunRelease || w.State() != Releasing {
		t.Fatalf("a failed fast release: %+v", cs)
	}
	if cs := w.Step(Event{Kind: Failed, Now: at(5)}); len(cs) != 0 || w.State() != Done {
		t.Fatalf("a failed full release: %+v %v", cs, w.State())
	}
	c.Token = "~s3~tok"
	if cs := New(c).Step(Event{Kind: Start, Now: at(0)}); cs[0].Kind != RunAcquire {
		t.Fatalf("a shared hold's start: %+v", cs)
	}
}

// The fast scripts' replies: a fence, or SLOW; a fast release's 1, 0 or -1.
func TestParseReplyOfTheFastScripts(t *testing.T) {
	for _, tc := range []struct {
		kind  CommandKind
		reply any
		want  Status
	}{{RunFastAcquire, "17", Granted}, {RunFastAcquire, int64(0), Slow}, {RunFastRelease, int64(1), Released},
		{RunFastRelease, int64(0), NotHeld}, {RunFastRelease, int64(-1), Slow}} {
		if r, err := ParseReply(tc.kind, false, tc.reply); err != nil || r.Status != tc.want {
			t.Errorf("%v %v: %+v %v, want %v", tc.kind, tc.reply, r, err, tc.want)
		}
	}
}
