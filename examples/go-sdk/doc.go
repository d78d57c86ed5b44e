// Package gosdk is a Go team's project that uses toolgate as a library, as
// a module of its own: a worker serving a typed Go function
// (weather, cmd/weather-worker), an approval bot (policy,
// cmd/approval-bot), and a program that drives a conversation to its end
// (cmd/drive). Its test plays a conversation through all of them on a
// system started by toolgatetest.
package gosdk
