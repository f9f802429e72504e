package packed_test

import (
	"fmt"

	"github.com/opkit-dev/opkit/internal/packed"
)

func ExampleFromJSON() {
	data := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings"},"data":{"port":"8080"},"replicas":3}`)
	p, metadata, apiVersion, kind, err := packed.FromJSON(nil, data, "metadata")
	if err != nil {
		fmt.Println(err)
		return
	}
	rest, err := packed.Unpack(string(p))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(apiVersion, kind)
	fmt.Printf("%s\n", metadata)
	fmt.Printf("%v\n", rest)
	// Output:
	// v1 ConfigMap
	// {"name":"settings"}
	// map[apiVersion:v1 data:map[port:8080] kind:ConfigMap replicas:3]
}
