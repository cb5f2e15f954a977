package api_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
)

// Duration's hand-quoted JSON is what json.Marshal makes of the duration
// string, and reads back to the same duration.
func TestDurationJSON(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1500 * time.Nanosecond, time.Millisecond, 30 * time.Second,
		90 * time.Minute, -5 * time.Second, math.MaxInt64, math.MinInt64} {
		got, err := json.Marshal(api.Duration(d))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(d.String())
		if string(got) != string(want) {
			t.Fatalf("%v: %s, want %s", d, got, want)
		}
		var back api.Duration
		if err := json.Unmarshal(got, &back); err != nil || time.Duration(back) != d {
			t.Fatalf("%s read back as %v (%v)", got, time.Duration(back), err)
		}
	}
}
