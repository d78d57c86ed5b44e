package chat

import (
	"fmt"
	"strconv"
	"strings"
)

// Cursor is the place of an event in an adapter's response, its SSE id:
// Base and Runs say which response (the last event stored before its
// request, the number of runs the conversation had then: the runs it
// follows are the later ones), Seq and Idx the stored event it was made of
// (0 for the events made before any), K its place among the events made of
// that one. A client that reconnects with it as Last-Event-ID gets the
// events after it: the response's events are made again from the log, the
// same ones in the same order, and those up to it left out.
type Cursor struct {
	Base uint64
	Runs int
	Seq  uint64
	Idx  int
	K    int
}

func (c Cursor) String() string {
	return fmt.Sprintf("%d.%d.%d.%d.%d", c.Base, c.Runs, c.Seq, c.Idx, c.K)
}

// After reports whether c comes after d in their response.
func (c Cursor) After(d Cursor) bool {
	switch {
	case c.Seq != d.Seq:
		return c.Seq > d.Seq
	case c.Idx != d.Idx:
		return c.Idx > d.Idx
	}
	return c.K > d.K
}

// ParseCursor reads a Cursor's String.
func ParseCursor(s string) (Cursor, error) {
	f := strings.Split(s, ".")
	if len(f) != 5 {
		return Cursor{}, fmt.Errorf("want an event id of this endpoint (five numbers joined by dots)")
	}
	var (
		c    Cursor
		errs [5]error
		n    [3]int
	)
	c.Base, errs[0] = strconv.ParseUint(f[0], 10, 64)
	n[0], errs[1] = strconv.Atoi(f[1])
	c.Seq, errs[2] = strconv.ParseUint(f[2], 10, 64)
	n[1], errs[3] = strconv.Atoi(f[3])
	n[2], errs[4] = strconv.Atoi(f[4])
	for _, err := range errs {
		if err != nil {
			return Cursor{}, fmt.Errorf("want an event id of this endpoint (five numbers joined by dots)")
		}
	}
	if n[0] < 0 || n[1] < 0 || n[2] < 0 {
		return Cursor{}, fmt.Errorf("want an event id of this endpoint (five numbers joined by dots)")
	}
	c.Runs, c.Idx, c.K = n[0], n[1], n[2]
	return c, nil
}
