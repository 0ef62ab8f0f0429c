// header.cpp - the public header must compile as C++ and link from C++.
#include <kvtier.h>
#include <cstdio>

int main()
{
	kvt_key k = kvt_ns_root(nullptr);
	std::printf("c++: %s %d\n", kvt_version(), (int)(k.lo == 0 && k.hi == 0));
	return 0;
}
