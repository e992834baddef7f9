package admin

import (
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"fenced.io/fenced/pkg/fencing/device"
	"fenced.io/fenced/pkg/vocab"
)

func TestCannotCheck(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:1/api/v1/nodes", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"no answer", fmt.Errorf("listing nodes: %w", refused), true},
		{"ErrCannotCheck", fmt.Errorf("%w: x", ErrCannotCheck), true},
		{"an answer: forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "a", errors.New("no")), false},
		{"an answer: not found", apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "a"), false},
		{"a refusal", fmt.Errorf("%w: BMC reads on", ErrRefused), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := CannotCheck(tc.err); got != tc.want {
				t.Errorf("CannotCheck(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestResultFailures(t *testing.T) {
	kind := func(k vocab.ErrorKind) error { return &device.Error{Kind: k, Err: errors.New(string(k))} }
	notReached := fmt.Errorf("%w: wanted off", device.ErrNotReached)
	cases := []struct {
		name        string
		failure     error
		cannotCheck bool
	}{
		{"bmc status ok", BMCResult{Action: "status"}.Failure(), false},
		{"bmc status bmc-error", BMCResult{Action: "status", Err: kind(vocab.KindBMC)}.Failure(), true},
		{"bmc off unreachable", BMCResult{Action: "off", Err: kind(vocab.KindUnreachable)}.Failure(), true},
		{"bmc off auth", BMCResult{Action: "off", Err: kind(vocab.KindAuth)}.Failure(), true},
		{"bmc off refused by the BMC", BMCResult{Action: "off", Err: kind(vocab.KindBMC)}.Failure(), false},
		{"bmc off not reached", BMCResult{Action: "off", Err: notReached}.Failure(), false},
		{"device status ok", DeviceResult{Action: vocab.OpPowerStatus, OK: true}.Failure(), false},
		{"device status unread", DeviceResult{Action: vocab.OpPowerStatus, Decision: "no level"}.Failure(), true},
		{"device off nothing reached", DeviceResult{Action: vocab.OpPowerOff, Plugs: []PlugResult{{ErrorKind: "timeout"}, {ErrorKind: "unreachable"}}}.Failure(), true},
		{"device off one plug answered", DeviceResult{Action: vocab.OpPowerOff, Plugs: []PlugResult{{ErrorKind: "timeout"}, {ErrorKind: "bmc-error"}}}.Failure(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.failure, ErrCannotCheck); got != tc.cannotCheck {
				t.Errorf("Failure() = %v: could not check %v, want %v", tc.failure, got, tc.cannotCheck)
			}
		})
	}
}
