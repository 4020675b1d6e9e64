package activities

import "testing"

func TestSlotsCountWhatRuns(t *testing.T) {
	s := NewSlots()
	s.Set("q", 3)
	free, size, r1 := s.take("q")
	if free != 2 || size != 3 {
		t.Fatalf("first take: %d free of %d, want 2 of 3", free, size)
	}
	_, _, r2 := s.take("q")
	free, _, r3 := s.take("q")
	if free != 0 {
		t.Fatalf("third take: %d free, want 0", free)
	}
	if free, _, r4 := s.take("q"); free != 0 { // over the slots: none free, not negative
		t.Fatalf("fourth take: %d free, want 0", free)
	} else {
		r4()
	}
	r1()
	r2()
	r3()
	if free, _, r := s.take("q"); free != 2 {
		t.Errorf("after the releases: %d free, want 2", free)
	} else {
		r()
	}
	if free, size, r := s.take("other"); free != 0 || size != 0 {
		t.Errorf("a queue without slots: %d free of %d, want 0 of 0", free, size)
	} else {
		r()
	}
	var none *Slots
	if _, size, r := none.take("q"); size != 0 {
		t.Errorf("nil Slots: size %d", size)
	} else {
		r()
	}
}
