package fence

import "testing"

// A look at a resource adds nothing to the fence: Highest made an entry
// for every name it was asked about, kept for good (found in review).
func TestMemHighestAddsNothing(t *testing.T) {
	var f Mem
	for _, name := range []string{"a", "b", "c"} {
		if got := f.Highest(name); got != 0 {
			t.Fatalf("Highest(%q) = %d on an empty fence", name, got)
		}
	}
	if err := f.Do("written", 7, nil); err != nil {
		t.Fatal(err)
	}
	if got := f.Highest("written"); got != 7 {
		t.Errorf("Highest(written) = %d, want 7", got)
	}
	if n := len(f.resources); n != 1 {
		t.Errorf("the fence keeps %d resources after looks at three unwritten ones and one write, want 1", n)
	}
}
