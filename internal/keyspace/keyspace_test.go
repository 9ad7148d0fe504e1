package keyspace

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/argerr"
)

// Slots as CLUSTER KEYSLOT gives them (the root package's tests compare
// every derivation with a real cluster).
func TestSlotFollowsTheRedisRule(t *testing.T) {
	for k, want := range map[string]int{"foo": 12182, "hello": 866, "{foo}bar": 12182, "x{foo}": 12182} {
		if got := Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
	if Slot("{}foo") != int(crc16("{}foo")%16384) {
		t.Error("an empty tag is taken for a tag")
	}
}

func TestDerivedKeysKeepTheSlotAndStayDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, k := range []string{"a", "{a}", "{a}:{a}", "b}", "{0}:b}", "x{}y", "}{", "{{}}", "a{b}c{d}", "é{ü}ß"} {
		d := Derive("dlock:p:", k)
		if Slot(d) != Slot(k) {
			t.Errorf("Derive(%q) = %q: slot %d, the key's %d", k, d, Slot(d), Slot(k))
		}
		if back, ok := KeyOf(d, "dlock:p:"); !ok || back != k {
			t.Errorf("KeyOf(%q) = %q, %v; want %q", d, back, ok, k)
		}
		if other, dup := seen[d]; dup {
			t.Errorf("%q and %q share %q", k, other, d)
		}
		seen[d] = k
	}
}

func TestCheckRefusesEmptyAndReservedKeys(t *testing.T) {
	for _, k := range []string{"", Reserved + "x"} {
		if err := Check(k); !errors.Is(err, argerr.Err) {
			t.Errorf("Check(%q) = %v", k, err)
		}
	}
	if err := Check("order:" + strings.Repeat("x", 3)); err != nil {
		t.Error(err)
	}
}
