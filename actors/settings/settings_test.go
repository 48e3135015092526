package settings_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/actors/msglimit"
	"github.com/mcpgw/aggregator/actors/settings"
)

func TestNormalized(t *testing.T) {
	tests := []struct {
		name string
		in   settings.Config
		want settings.Config
	}{
		{name: "zero values take the defaults", in: settings.Config{},
			want: settings.Config{AliasSeparator: "__", StableAfter: 30 * time.Second, MaxMessageBytes: msglimit.DefaultMaxMessageBytes}},
		{name: "set values stay", in: settings.Config{AliasSeparator: "-", StableAfter: time.Second, MaxMessageBytes: 10},
			want: settings.Config{AliasSeparator: "-", StableAfter: time.Second, MaxMessageBytes: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.Normalized()
			if got.AliasSeparator != tt.want.AliasSeparator || got.StableAfter != tt.want.StableAfter || got.MaxMessageBytes != tt.want.MaxMessageBytes {
				t.Fatalf("Normalized = %q %v %d, want %q %v %d", got.AliasSeparator, got.StableAfter, got.MaxMessageBytes,
					tt.want.AliasSeparator, tt.want.StableAfter, tt.want.MaxMessageBytes)
			}
		})
	}
}

func TestDefaultIsNormalized(t *testing.T) {
	d := settings.Default()
	n := d.Normalized()
	if d.AliasSeparator != n.AliasSeparator || d.StableAfter != n.StableAfter || d.MaxMessageBytes != n.MaxMessageBytes {
		t.Fatal("Default has values Normalized would change")
	}
}

func ExampleDefault() {
	c := settings.Default()
	fmt.Println(c.RequestTimeout, c.MaxServers, c.AliasSeparator)
	// Output: 1m0s 50 __
}
