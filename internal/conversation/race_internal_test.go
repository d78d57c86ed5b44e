//go:build race

package conversation

const raceEnabled = true
