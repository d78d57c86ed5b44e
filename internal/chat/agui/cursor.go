package agui

import (
	"fmt"
	"strconv"
	"strings"
)

// cursor is the place of an event in an AG-UI run's stream, its SSE id:
// base and runs say which run (the last event stored before its input, the
// number of runs the conversation had then), seq and idx the stored event
// it was made of (0 for the events made before any), k its place among the
// events made of that one. A client that reconnects with it as
// Last-Event-ID gets the events after it: the run's events are made again
// from the log, the same ones in the same order, and those up to it left
// out.
type cursor struct {
	base uint64
	runs int
	seq  uint64
	idx  int
	k    int
}

func (c cursor) String() string {
	return fmt.Sprintf("%d.%d.%d.%d.%d", c.base, c.runs, c.seq, c.idx, c.k)
}

// after reports whether c comes after d in their run.
func (c cursor) after(d cursor) bool {
	switch {
	case c.seq != d.seq:
		return c.seq > d.seq
	case c.idx != d.idx:
		return c.idx > d.idx
	}
	return c.k > d.k
}

func parseCursor(s string) (cursor, error) {
	f := strings.Split(s, ".")
	if len(f) != 5 {
		return cursor{}, fmt.Errorf("want an event id of this endpoint (five numbers joined by dots)")
	}
	var (
		c    cursor
		errs [5]error
		n    [3]int
	)
	c.base, errs[0] = strconv.ParseUint(f[0], 10, 64)
	n[0], errs[1] = strconv.Atoi(f[1])
	c.seq, errs[2] = strconv.ParseUint(f[2], 10, 64)
	n[1], errs[3] = strconv.Atoi(f[3])
	n[2], errs[4] = strconv.Atoi(f[4])
	for _, err := range errs {
		if err != nil {
			return cursor{}, fmt.Errorf("want an event id of this endpoint (five numbers joined by dots)")
		}
	}
	if n[0] < 0 || n[1] < 0 || n[2] < 0 {
		return cursor{}, fmt.Errorf("want an event id of this endpoint (five numbers joined by dots)")
	}
	c.runs, c.idx, c.k = n[0], n[1], n[2]
	return c, nil
}
