// etcd at the release k8s.io/kubernetes pins, as upstream's etcd binary builds it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
