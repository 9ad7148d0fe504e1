package tokens

import "testing"

// A token names its primitive in the documented vocabulary (lock,
// semaphore, rwmutex, election), and a read-write lock's its mode.
func TestPrimitiveAndModeOfEachKindOfToken(t *testing.T) {
	for _, tc := range []struct{ kind, value, primitive, mode string }{
		{"", "", "lock", ""},
		{"~s3~", "", "semaphore", ""},
		{Read, "", "rwmutex", "read"},
		{Write, "", "rwmutex", "write"},
		{"", "host-a", "election", ""},
	} {
		tok, err := New(tc.kind, tc.value, tc.value != "")
		if err != nil {
			t.Fatal(err)
		}
		if p, m := Primitive(tok), Mode(tok); p != tc.primitive || m != tc.mode {
			t.Errorf("%s: primitive %q, mode %q; want %q, %q", Redact(tok), p, m, tc.primitive, tc.mode)
		}
	}
}
