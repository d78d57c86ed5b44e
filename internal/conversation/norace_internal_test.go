//go:build !race

package conversation

const raceEnabled = false
