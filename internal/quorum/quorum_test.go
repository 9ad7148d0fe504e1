package quorum

import (
	"fmt"
	"slices"
	"testing"
)

func TestVerdictsOfOneThreeAndFourNodes(t *testing.T) {
	for _, c := range []struct {
		n, yes, no int
		want       Verdict
	}{
		{1, 1, 0, Agreed}, {1, 0, 1, Refused}, {1, 0, 0, Undecided},
		{3, 2, 0, Agreed}, {3, 1, 2, Refused}, {3, 1, 1, Undecided},
		{4, 3, 0, Agreed}, {4, 2, 2, Refused}, {4, 2, 1, Undecided},
	} {
		if got := (Votes{Yes: c.yes, No: c.no}).Of(c.n); got != c.want {
			t.Errorf("%d nodes, %d yes, %d no: verdict %d, want %d", c.n, c.yes, c.no, got, c.want)
		}
	}
}

func TestBallotDecidesOnceWhenLateAnswersCompleteIt(t *testing.T) {
	var decided []Verdict
	b := &Ballot{N: 3}
	add := func(yes bool, err error) {
		if vd, first := b.Add(yes, err); first {
			decided = append(decided, vd)
		}
	}
	add(true, nil)
	add(false, fmt.Errorf("timeout"))
	if len(decided) != 0 {
		t.Fatalf("decided %v after one yes of three", decided)
	}
	add(true, nil) // late
	add(true, nil)
	if !slices.Equal(decided, []Verdict{Agreed}) {
		t.Fatalf("decided %v, want [agreed] once", decided)
	}
}
