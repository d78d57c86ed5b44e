// Package gosdk is a Go team's project that uses toolgate as a library, as
// a module of its own: a worker serving a typed Go function
// (weather, mail, cmd/weather-worker), an approval bot (policy,
// cmd/approval-bot), a program that drives a conversation to its end
// (cmd/drive), and an embedded agent's own Go tools (payments) with the
// program that embeds its orchestrator in production (cmd/payments-agent,
// package toolgate). The tests
// play conversations through them on systems started by toolgatetest.
package gosdk
