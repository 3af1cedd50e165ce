// See rendezvous/store.h: the names libtorch's ProcessGroupGloo.hpp takes from gloo.
#pragma once
#include "rendezvous/store.h"
