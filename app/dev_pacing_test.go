package app

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Dev runs unpaced by default (the simulator has no secondary limits unless
// asked), but a Pacing given explicitly is honoured with Dev as without
// it, as `serve --dev --github-pacing on` promises: it is how pacing is
// tried against the simulator.
func TestServerDevPacing(t *testing.T) {
	t.Parallel()
	on, off := true, false
	for _, tc := range []struct {
		name   string
		pacing *bool
		want   bool
	}{
		{"default", nil, false},
		{"on", &on, true},
		{"off", &off, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			startServer(t, Config{Dev: true, Pacing: tc.pacing, Logger: zap.New(core)})
			serving := logs.FilterField(zap.String("event", "serving")).All()
			if len(serving) != 1 {
				t.Fatalf("%d serving events logged", len(serving))
			}
			if got := serving[0].ContextMap()["pacing"]; got != tc.want {
				t.Errorf("pacing = %v, want %v", got, tc.want)
			}
		})
	}
}
