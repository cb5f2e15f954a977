package grantor

import (
	"runtime/debug"
	"testing"
)

// Build names the commit leased was built from, or the version installed
// or required; a build that says neither is "".
func TestBuildOf(t *testing.T) {
	main := func(version string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: version}, Settings: settings}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"a clone's commit", main("(devel)", rev, debug.BuildSetting{Key: "vcs.modified", Value: "false"}), true, "0123456789ab"},
		{"with changes", main("(devel)", rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), true, "0123456789ab+dirty"},
		{"go install @version", main("v0.2.0"), true, "v0.2.0"},
		{"no version control", main("(devel)"), true, ""},
		{"a program using leased", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"}, Settings: []debug.BuildSetting{rev},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.3.1"}}}, true, "v0.3.1"},
		{"no build information", nil, false, ""},
	} {
		if got := buildOf(c.bi, c.ok); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
