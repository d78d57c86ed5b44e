package agenttool_test

import (
	"fmt"

	"github.com/toolgate/toolgate/agenttool"
)

// A tool's args schema comes from its args type, which must be a struct.
func ExampleNew() {
	_, err := agenttool.New("double", "Double a number.", func(_ *agenttool.RunContext, n int) (int, error) { return 2 * n, nil })
	fmt.Println(err)
	_, err = agenttool.New("double", "Double a number.", func(_ *agenttool.RunContext, a struct {
		N int `json:"n"`
	}) (int, error) {
		return 2 * a.N, nil
	})
	fmt.Println(err)
	// Output:
	// tool double: args type int is not a struct: give its JSON Schema explicitly
	// <nil>
}
