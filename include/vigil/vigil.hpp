// Umbrella header for the Vigil core API.
#pragma once

#include "vigil/diagnostic.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"
#include "vigil/tensor.hpp"
#include "vigil/trace.hpp"
