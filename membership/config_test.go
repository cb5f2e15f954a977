package membership

import (
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigsAreValid(t *testing.T) {
	for _, c := range []Config{DefaultConfig("a"), TestConfig("a")} {
		if err := c.Validate(); err != nil {
			t.Errorf("%v: %v", c.Profile, err)
		}
	}
	lan, test := DefaultConfig("a"), TestConfig("a")
	if lan.Profile != ProfileLAN || lan.BindPort != DefaultPort || lan.HeartbeatInterval != 500*time.Millisecond {
		t.Errorf("DefaultConfig = %+v", lan)
	}
	if test.Profile != ProfileTest || test.BindPort != 0 || test.BindAddr != "127.0.0.1" || test.HeartbeatInterval != 100*time.Millisecond {
		t.Errorf("TestConfig = %+v", test)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		meta   bool // also ErrMeta
	}{
		{"empty name", func(c *Config) { c.Name = "" }, false},
		{"long name", func(c *Config) { c.Name = strings.Repeat("n", MaxNameLen+1) }, false},
		{"name not UTF-8", func(c *Config) { c.Name = "a\xff" }, false},
		{"name with newline", func(c *Config) { c.Name = "a\nb" }, false},
		{"empty bind address", func(c *Config) { c.BindAddr = "" }, false},
		{"bind hostname", func(c *Config) { c.BindAddr = "localhost" }, false},
		{"negative bind port", func(c *Config) { c.BindPort = -1 }, false},
		{"bind port too large", func(c *Config) { c.BindPort = 65536 }, false},
		{"bad advertise address", func(c *Config) { c.AdvertiseAddr = "10.0.0" }, false},
		{"advertise port too large", func(c *Config) { c.AdvertiseAddr, c.AdvertisePort = "10.0.0.1", 70000 }, false},
		{"negative advertise port", func(c *Config) { c.AdvertiseAddr, c.AdvertisePort = "10.0.0.1", -1 }, false},
		{"advertise port alone", func(c *Config) { c.AdvertisePort = 7000 }, false},
		{"unknown profile", func(c *Config) { c.Profile = 7 }, false},
		{"zero heartbeat", func(c *Config) { c.HeartbeatInterval = 0 }, false},
		{"tiny heartbeat", func(c *Config) { c.HeartbeatInterval = time.Millisecond }, false},
		{"huge heartbeat", func(c *Config) { c.HeartbeatInterval = time.Hour }, false},
		{"zero threshold", func(c *Config) { c.PhiThreshold = 0 }, false},
		{"negative threshold", func(c *Config) { c.PhiThreshold = -8 }, false},
		{"NaN threshold", func(c *Config) { c.PhiThreshold = math.NaN() }, false},
		{"infinite threshold", func(c *Config) { c.PhiThreshold = math.Inf(1) }, false},
		{"threshold the detector cannot reach", func(c *Config) { c.PhiThreshold = MaxSuspicion }, false},
		{"negative retention", func(c *Config) { c.DeadRetention = -time.Second }, false},
		{"oversized meta", func(c *Config) { c.Meta = map[string]string{"k": strings.Repeat("v", MaxMetaSize)} }, true},
		{"empty meta key", func(c *Config) { c.Meta = map[string]string{"": "v"} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := TestConfig("node")
			tt.change(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			if tt.meta != errors.Is(err, ErrMeta) {
				t.Errorf("err = %v, ErrMeta %v", err, tt.meta)
			}
			if _, err := Start(c); !errors.Is(err, ErrConfig) {
				t.Errorf("Start: err = %v, want ErrConfig", err)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{"IPv6 loopback", func(c *Config) { c.BindAddr = "::1" }},
		{"any address", func(c *Config) { c.BindAddr = "0.0.0.0" }},
		{"advertise address without port", func(c *Config) { c.AdvertiseAddr = "10.0.0.1" }},
		{"advertise address and port", func(c *Config) { c.AdvertiseAddr, c.AdvertisePort = "10.0.0.1", 7000 }},
		{"port 65535", func(c *Config) { c.BindPort = 65535 }},
		{"zero retention", func(c *Config) { c.DeadRetention = 0 }},
		{"unicode name", func(c *Config) { c.Name = "grantor-zürich" }},
		{"fractional threshold", func(c *Config) { c.PhiThreshold = 0.5 }},
		{"meta", func(c *Config) { c.Meta = map[string]string{"nats_url": "nats://127.0.0.1:4222", "role": ""} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig("node")
			tt.change(&c)
			if err := c.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestMemberlistConfig(t *testing.T) {
	c := TestConfig("a")
	c.AdvertiseAddr = "10.0.0.1"
	mc := c.memberlistConfig(slog.New(slog.DiscardHandler))
	if mc.Name != "a" || mc.BindAddr != "127.0.0.1" || mc.AdvertiseAddr != "10.0.0.1" || mc.AdvertisePort != 0 {
		t.Errorf("addresses: %+v", mc)
	}
	if mc.ProbeInterval != 100*time.Millisecond || mc.SuspicionMult != 8 || mc.Logger == nil || mc.LogOutput != nil {
		t.Errorf("test profile not applied: %+v", mc)
	}
	lan := DefaultConfig("b")
	lan.AdvertiseAddr = "10.0.0.2"
	mc = lan.memberlistConfig(slog.New(slog.DiscardHandler))
	if mc.ProbeInterval != time.Second || mc.SuspicionMult != 4 || mc.AdvertisePort != DefaultPort {
		t.Errorf("LAN profile: %+v", mc)
	}
}
