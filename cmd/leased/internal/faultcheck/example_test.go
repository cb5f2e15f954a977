package faultcheck_test

import (
	"fmt"
	"strings"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
)

// Two holder processes' logs: h2 is granted the lease 1 s after h1's
// grant, while h1's 3 s lease still gives it a window to 2.697 s. The
// last line of h2's log was cut when it was killed.
func Example() {
	h1 := `{"type":"op","proc":"h1","seq":1,"holder":"h1","lease":"L","op":"grant","t_send":1000000000,"t_reply":1010000000,"req":{"d_ns":3000000000},"code":"ok","reply":{"token":5,"revision":5}}
`
	h2 := `{"type":"op","proc":"h2","seq":1,"holder":"h2","lease":"L","op":"grant","t_send":2000000000,"t_reply":2010000000,"req":{"d_ns":3000000000},"code":"ok","reply":{"token":9,"revision":9}}
{"type":"op","proc":"h2","seq":2,"holder":"h2","lea`
	var streams [][]faultcheck.Record
	for _, log := range []string{h1, h2} {
		recs, truncated, err := faultcheck.Decode(strings.NewReader(log))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(len(recs), "records, truncated:", truncated)
		streams = append(streams, recs)
	}
	h, err := faultcheck.NewHistory(streams...)
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := faultcheck.Check(h, faultcheck.DefaultParams())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("tenures:", rep.Figures.Tenures)
	for _, v := range rep.Violations {
		fmt.Println(v)
	}
	// Output:
	// 1 records, truncated: false
	// 1 records, truncated: true
	// tenures: 2
	// overlap "L" [h1#1 h2#1]: token 5 (h1) holds until 3697000000; token 9 (h2) holds from 2010000000, 1.687s before
}
