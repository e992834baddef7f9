package core

import (
	"strings"
	"testing"
)

func TestRecovery(t *testing.T) {
	cases := []struct {
		name                  string
		ready                 bool
		bootNow, bootFenced   string
		left                  int
		want                  bool
		failing, detailSubstr string
	}{
		{"back on a new boot, nothing left", true, "boot-2", "boot-1", 0, true, "", ""},
		{"not Ready", false, "boot-2", "boot-1", 0, false, "ready", "not Ready"},
		{"same boot: never off", true, "boot-1", "boot-1", 0, false, "new boot ID", "may never have been off"},
		{"evidence without boot ID", true, "boot-2", "", 0, false, "new boot ID", "cannot be verified"},
		{"node without boot ID", true, "", "boot-1", 0, false, "new boot ID", "reports no boot ID"},
		{"attachments left", true, "boot-2", "boot-1", 2, false, "volume attachments", "2 left: va-1, va-2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checks := Recovery(c.ready, c.bootNow, c.bootFenced, c.left, "va-1", "va-2")
			if got := Recovered(checks); got != c.want {
				t.Fatalf("Recovered = %v, want %v (%+v)", got, c.want, checks)
			}
			for _, ch := range checks {
				if ch.Name == c.failing && (ch.OK || !strings.Contains(ch.Detail, c.detailSubstr)) {
					t.Errorf("check %s: %+v, want failing with %q", ch.Name, ch, c.detailSubstr)
				}
			}
		})
	}
	if Recovered(nil) {
		t.Error("no checks count as recovered")
	}
}
