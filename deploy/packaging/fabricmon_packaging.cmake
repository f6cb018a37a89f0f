# Install rules for the deployment files and the Debian packages (CPack, DEB generator).
# Included once, at the end of the top-level CMakeLists.txt.
#
#   cpack -G DEB --config build/CPackConfig.cmake -B OUTDIR
#     → fabricmon-agent_<version>-1_<arch>.deb, fabricmon-aggregator_<version>-1_<arch>.deb
#
# Component agent      → package fabricmon-agent: fabricmon-agent, its unit, the sysusers entry,
#                        examples (agent.textproto, the fabric-collector drop-in, the umad udev rule)
# Component aggregator → package fabricmon-aggregator: fabricmon-aggregator and the fabricmon CLI,
#                        its unit, the sysusers entry, the example aggregator.textproto, the
#                        Prometheus rules and scrape config, dashboards/ (whatever JSON/YAML is there)
#
# Layout (prefix /usr in the packages; `cmake --install` keeps the default /usr/local and rewrites
# the paths inside units accordingly, see install_file.cmake):
#   <prefix>/bin/                                  binaries
#   <prefix>/lib/systemd/system/*.service          units
#   <prefix>/lib/sysusers.d/fabricmon-*.conf       user fabricmon
#   <prefix>/share/doc/<package>/                  README.md, examples/
#   <prefix>/share/fabricmon/prometheus/           rules.yml, scrape.yml
#   <prefix>/share/fabricmon/dashboards/           Grafana dashboards
#   /etc/fabricmon/                                empty: the administrator writes the config
# No file in /etc is shipped, so there are no conffiles: each unit starts only once its
# /etc/fabricmon/*.textproto exists (ConditionPathExists=).
include_guard(GLOBAL)
include(GNUInstallDirs)

if(NOT SYSTEMD_FOUND)
  message(WARNING "fabricmon: libsystemd not found: the daemons will not send sd_notify "
                  "READY=1, but deploy/systemd/*.service are Type=notify. Install libsystemd-dev.")
endif()

set(FABRICMON_PACKAGE_CONTACT "fabricmon maintainers <fabricmon@localhost>" CACHE STRING
    "Maintainer field of the Debian packages")

set(_fm_deploy "${PROJECT_SOURCE_DIR}/deploy")
set(_fm_stage "${CMAKE_CURRENT_BINARY_DIR}/fabricmon-install-stage")

# fm_install_rewritten(<component> <source> <destination dir> <installed name>)
# Installs a text file whose absolute paths follow the install prefix (install_file.cmake).
function(fm_install_rewritten component src dest name)
  install(CODE "
    set(FM_SRC \"${src}\")
    set(FM_DEST_DIR \"${dest}\")
    set(FM_NAME \"${name}\")
    set(FM_STAGE \"${_fm_stage}\")
    include(\"${_fm_deploy}/packaging/install_file.cmake\")"
    COMPONENT ${component})
endfunction()

# --- binaries (the daemons' own install() rules use the default component; these assign them
# to the packages) ---
install(TARGETS fabricmon-agent RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT agent)
install(TARGETS fabricmon-aggregator fabricmon
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT aggregator)

foreach(_fm_component agent aggregator)
  set(_fm_package "fabricmon-${_fm_component}")
  set(_fm_doc "${CMAKE_INSTALL_DATAROOTDIR}/doc/${_fm_package}")
  fm_install_rewritten(${_fm_component} "${_fm_deploy}/systemd/${_fm_package}.service"
                       "lib/systemd/system" "${_fm_package}.service")
  install(FILES "${_fm_deploy}/systemd/fabricmon.sysusers.conf"
          DESTINATION "lib/sysusers.d" RENAME "${_fm_package}.conf" COMPONENT ${_fm_component})
  install(FILES "${PROJECT_SOURCE_DIR}/README.md" DESTINATION "${_fm_doc}"
          COMPONENT ${_fm_component})
  install(FILES "${_fm_deploy}/config/${_fm_component}.textproto"
          DESTINATION "${_fm_doc}/examples" COMPONENT ${_fm_component})
  # /etc/fabricmon (or <prefix>/etc/fabricmon): where the units look for the configuration.
  install(CODE "
    if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      file(MAKE_DIRECTORY \"\$ENV{DESTDIR}/etc/fabricmon\")
    else()
      file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/etc/fabricmon\")
    endif()" COMPONENT ${_fm_component})
endforeach()

# Agent extras: opt-in access to /dev/infiniband/umad* for the MAD fabric collector.
fm_install_rewritten(agent "${_fm_deploy}/systemd/fabricmon-agent.service.d/fabric-collector.conf"
                     "${CMAKE_INSTALL_DATAROOTDIR}/doc/fabricmon-agent/examples/fabricmon-agent.service.d"
                     "fabric-collector.conf")
install(FILES "${_fm_deploy}/systemd/90-fabricmon-umad.rules"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/doc/fabricmon-agent/examples" COMPONENT agent)

# Aggregator extras: Prometheus rules and scrape config, Grafana dashboards (dashboards/ may be
# empty or absent; files added later are picked up at install time without re-running CMake).
install(FILES "${_fm_deploy}/prometheus/rules.yml" "${_fm_deploy}/prometheus/scrape.yml"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/prometheus" COMPONENT aggregator)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/dashboards/"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fabricmon/dashboards"
        COMPONENT aggregator OPTIONAL
        FILES_MATCHING PATTERN "*.json" PATTERN "*.yml" PATTERN "*.yaml")

# --- maintainer scripts ---
foreach(_fm_component agent aggregator)
  set(FM_PACKAGE "fabricmon-${_fm_component}")
  set(FM_UNIT "fabricmon-${_fm_component}.service")
  set(FM_SYSUSERS "fabricmon-${_fm_component}.conf")
  set(FM_CONFIG "/etc/fabricmon/${_fm_component}.textproto")
  set(_fm_scripts "")
  foreach(_fm_script postinst prerm postrm)
    configure_file("${_fm_deploy}/packaging/debian/${_fm_script}.in"
                   "${CMAKE_CURRENT_BINARY_DIR}/debian/${_fm_component}/${_fm_script}" @ONLY)
    list(APPEND _fm_scripts "${CMAKE_CURRENT_BINARY_DIR}/debian/${_fm_component}/${_fm_script}")
  endforeach()
  string(TOUPPER "${_fm_component}" _fm_upper)
  set(CPACK_DEBIAN_${_fm_upper}_PACKAGE_CONTROL_EXTRA "${_fm_scripts}")
endforeach()

# --- CPack ---
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "fabricmon")
set(CPACK_PACKAGE_VENDOR "fabricmon")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "${FABRICMON_PACKAGE_CONTACT}")
set(CPACK_COMPONENTS_ALL agent aggregator)  # not "Unspecified": the daemons' own install() rules
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Absolute install paths (/etc/fabricmon) and prefix-dependent unit text need the DESTDIR
# mechanism with the final prefix: CMAKE_INSTALL_PREFIX is /usr while CPack installs.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends from dpkg-shlibdeps (package dpkg-dev)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_AGENT_PACKAGE_NAME "fabricmon-agent")
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_NAME "fabricmon-aggregator")
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_SUGGESTS "prometheus")
# First line: the summary; then the extended description (CPACK_PACKAGE_DESCRIPTION_SUMMARY is
# left unset: CPack would prepend it to both).
set(CPACK_DEBIAN_AGENT_DESCRIPTION "fabricmon node agent: fabric telemetry for GPU clusters
Reads InfiniBand/RoCE HCA counters (sysfs), ethtool PFC/ECN statistics, host network
and TCP counters and NVLink state (NVML) on every GPU node, and streams them over gRPC
to fabricmon-aggregator. Runs as user fabricmon under a hardened systemd unit.")
set(CPACK_DEBIAN_AGGREGATOR_DESCRIPTION "fabricmon aggregator and CLI: fabric telemetry for GPU clusters
Receives the agents' streams, computes rates with each counter's width and overflow
semantics and exports them as Prometheus metrics, which the fabricmon command-line tool
also queries. Ships Prometheus alert rules and a scrape configuration.")
include(CPack)
