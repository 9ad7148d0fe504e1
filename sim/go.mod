module github.com/dlock-go/dlock/sim

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/anishathalye/porcupine v1.3.1
	github.com/dlock-go/dlock v0.0.0-00010101000000-000000000000
)

require github.com/yuin/gopher-lua v1.1.1 // indirect

replace github.com/dlock-go/dlock => ../
