package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Lines of /proc/net/tcp: a sink on port 8091 (0x1F9B) with one socket in
// TIME_WAIT on the client side, one on the sink's side, one established,
// and one in TIME_WAIT towards another port.
const procNetTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F9B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A1B2 0100007F:1F9B 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0000000000000000
   2: 0100007F:1F9B 0100007F:C3D4 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0000000000000000
   3: 0100007F:E5F6 0100007F:1F9B 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:A1B3 0100007F:1F9C 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0000000000000000
`

func TestCountTimeWait(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tcp")
	if err := os.WriteFile(p, []byte(procNetTCP), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := countTimeWait(p, 8091); err != nil || n != 2 {
		t.Fatalf("countTimeWait = %d, %v; want 2", n, err)
	}
	if n, err := countTimeWait(filepath.Join(t.TempDir(), "none"), 8091); err != nil || n != 0 {
		t.Fatalf("missing file: %d, %v; want 0, nil", n, err)
	}
}

func TestPerDelivery(t *testing.T) {
	per, total := perDelivery(map[string]float64{"sink": 2.5, "temporal": 1, "idle": 0.000001}, 100_000)
	if per["sink"] != 25 || per["temporal"] != 10 || total != 35 {
		t.Fatalf("perDelivery = %v, %v; want sink 25, temporal 10, total 35", per, total)
	}
	if _, ok := per["idle"]; ok {
		t.Fatalf("a process under 0.05 µs per delivery is listed: %v", per)
	}
}

func TestDiffCPURestartedProcess(t *testing.T) {
	before := map[string]procCPU{"temporal": {pid: 1, secs: 100}, "sink": {pid: 2, secs: 5}}
	after := map[string]procCPU{"temporal": {pid: 3, secs: 7}, "sink": {pid: 2, secs: 8}}
	d := diffCPU(before, after)
	if d["temporal"] != 7 || d["sink"] != 3 {
		t.Fatalf("diffCPU = %v; want temporal 7 (restarted), sink 3", d)
	}
}

func TestTemporalCosts(t *testing.T) {
	light := Row{Scenario: "light-relative", Size: 2000, Seconds: 40, EventsPerSec: 50, DeliveriesPerSec: 1000, CPUSeconds: map[string]float64{"temporal": 10}}
	temporalCosts(&light)
	// 10 s over 2,000 events and 40,000 deliveries.
	if light.TemporalMsPerEvent != 5 || light.TemporalMsPer1000 != 250 {
		t.Errorf("light: %v ms/event, %v ms/1000; want 5, 250", light.TemporalMsPerEvent, light.TemporalMsPer1000)
	}
	heavy := Row{Scenario: "heavy", Size: 1_000_000, Seconds: 50, DeliveriesPerSec: 20_000, CPUSeconds: map[string]float64{"temporal": 12}}
	temporalCosts(&heavy)
	if heavy.TemporalMsPerEvent != 0 || heavy.TemporalMsPer1000 != 12 {
		t.Errorf("heavy: %v ms/event, %v ms/1000; want none, 12", heavy.TemporalMsPerEvent, heavy.TemporalMsPer1000)
	}
	iso := Row{Scenario: "isolation", Size: 2000, Seconds: 40, EventsPerSec: 50, DeliveriesPerSec: 1000, CPUSeconds: map[string]float64{"temporal": 30}}
	temporalCosts(&iso)
	if iso.TemporalMsPerEvent != 0 || iso.TemporalMsPer1000 != 0 {
		t.Errorf("isolation (small and big events mixed): %v, %v; want neither", iso.TemporalMsPerEvent, iso.TemporalMsPer1000)
	}
}

func TestFloorRatios(t *testing.T) {
	rows := []Row{
		{Scenario: "light-burst", Size: 2000, Seconds: 10, CPUSeconds: map[string]float64{"temporal": 8}},
		{Scenario: "noop-burst", Size: 2000, Seconds: 10, CPUSeconds: map[string]float64{"temporal": 10}},
		{Scenario: "light-relative", Size: 2000, Seconds: 20, CPUSeconds: map[string]float64{"temporal": 12}},
		{Scenario: "heavy", Size: 1000, Seconds: 1, DeliveriesPerSec: 1000, CPUSeconds: map[string]float64{"temporal": 1}},
	}
	for i := range rows {
		temporalCosts(&rows[i])
	}
	if rows[1].TemporalMsPerEvent != 5 {
		t.Fatalf("noop-burst: %v ms per workflow, want 5", rows[1].TemporalMsPerEvent)
	}
	floorRatios(rows)
	// light-burst: 4 ms per event over the floor's 5.
	if rows[0].Ratio != 0.8 || rows[0].RatioOf == "" {
		t.Errorf("light-burst ratio %v (%q), want 0.8 of noop-burst", rows[0].Ratio, rows[0].RatioOf)
	}
	// light-relative's floor did not run; heavy has none.
	if rows[2].RatioOf != "" || rows[3].RatioOf != "" || rows[1].RatioOf != "" {
		t.Errorf("ratios set without a floor: %+v", rows)
	}
}
